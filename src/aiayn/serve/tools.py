"""Tool calling on /v1/chat/completions (OpenAI's ``tools`` and ``tool_choice``), for models whose chat template
takes ``tools``, one parser per call format the templates teach (vLLM's ``tool_parsers``; :func:`parser_for`
chooses it from the template's text):

    <tool_call>                                                   HERMES: Qwen2.5, Qwen3, Hermes 2 Pro, SmolLM2
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

    {"name": "get_weather", "parameters": {"city": "Paris"}}      LLAMA3: Llama 3.1-3.3 (JSON tool calls)

    [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}]     MISTRAL

Each :class:`ToolParser` has its grammar (what a ``required`` or named choice imposes, written in its format), its
stream (the calls taken out of the text as it arrives: ``serve/toolstream.py``) and its parse (a whole reply, through
the same stream). This module also turns the request into what the template takes (assistant calls with their
arguments as objects, as Hugging Face templates expect). No web imports.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from aiayn.decoding.constraint import styled
from aiayn.serve.toolstream import LEADS, ToolStream

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)  # one Markdown code block, the whole reply


@dataclass(frozen=True)
class ToolParser:
    """How a model family writes its calls: the marker before a call (or before the list of calls) and after it,
    the key of the arguments, and whether the calls are one JSON list. ``tagged``: each call between its two
    markers, anywhere in the reply (streamed as written); otherwise the reply that is a call is one JSON call, or a
    list of them, read whole at its end (:meth:`bare`), which every format also accepts."""

    name: str
    open: str | None = None
    close: str | None = None
    key: str = "arguments"
    listed: bool = False

    @property
    def tagged(self) -> bool:
        return self.open is not None and self.close is not None

    def grammar(self, tools: list[dict], choice: str | dict, marker_ids: dict[str, int | None] | None = None,
                answer: dict | None = None) -> str | None:
        """The grammar (llguidance's Lark dialect) that ``tool_choice`` imposes: ``required``, one call to any of
        ``tools``; a named function, one call to it; its arguments follow the function's parameter schema; written
        in this format. ``auto``: None (the model chooses), or with an ``answer`` schema (``response_format``), a
        call or that answer; ``none``: None. ``marker_ids``: the ids of the markers where the vocabulary has each as
        one added token (Qwen2.5's ``<tool_call>``): the grammar asks for that token, the one the model learnt to
        write, not its characters. A required or named call with an ``answer`` is a ValueError."""
        if choice == "none" or (choice == "auto" and answer is None):
            return None
        if choice != "auto" and answer is not None:
            raise ValueError("response_format: not with a required or named tool_choice (the reply is a call)")
        wanted = [choice["function"]["name"]] if isinstance(choice, dict) else [t["function"]["name"] for t in tools]
        schemas = [_call_schema(t["function"], self.key) for t in tools if t["function"]["name"] in wanted]
        body = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        body = styled({"type": "array", "items": body, "minItems": 1, "maxItems": 1} if self.listed else body)
        start, end = (None if m is None else _marker(m, marker_ids or {}) for m in (self.open, self.close))
        rules = " ".join(part for part in (start, '"\\n"' if end else None, "call", '"\\n"' if end else None, end)
                         if part) + f"\ncall: %json {json.dumps(body)}"
        if answer is None:
            return f"start: {rules}"
        return f"start: answer | {rules}\nanswer: %json {json.dumps(styled(answer))}"

    def stream(self, names: set[str]) -> ToolStream:
        """A :class:`~aiayn.serve.toolstream.ToolStream` taking this format's calls to ``names`` out of a reply."""
        return ToolStream(names, self)

    def parse(self, text: str, names: set[str]) -> tuple[str | None, list[dict]]:
        """A whole reply -> (the content outside its calls, or None if there is none; OpenAI's ``tool_calls``),
        through the stream a streamed reply takes. A call that does not parse as JSON, or names no function
        offered, stays in the content as text."""
        stream = self.stream(names)
        content, _ = stream.add(text)
        rest, _ = stream.flush()
        return ((content + rest).strip() or None), stream.calls

    def block_calls(self, block: str, names: set[str]) -> tuple[str, list[dict]]:
        """One tagged block (``open`` ... ``close``) -> ("", its call), or (the block as text, []) where it is no
        call: not JSON, or naming no function offered."""
        body = block.removeprefix(self.open or "").removesuffix(self.close or "").strip()
        try:
            call = _call_of(json.loads(body), names)
        except ValueError:
            call = None
        return ("", [call]) if call is not None else (block, [])

    @staticmethod
    def bare(text: str, names: set[str]) -> list[dict]:
        """Calls a model wrote as its whole reply: one JSON object, or a list of them, bare, in one Markdown fence or
        after Llama 3's ``<|python_tag|>`` or Mistral's ``[TOOL_CALLS]``, each naming an offered function with its
        ``arguments`` (or Llama 3's ``parameters``). Anything else, a name not offered or text beside the JSON, is
        no call: not guessed."""
        text = text.strip()
        for lead in LEADS:
            text = text.removeprefix(lead).lstrip()
        body = _FENCE.fullmatch(text)
        try:
            found = json.loads(body.group(1) if body else text)
        except ValueError:
            return []
        found = found if isinstance(found, list) else [found]
        if not found or not all(isinstance(f, dict) and isinstance(f.get("arguments", f.get("parameters")), dict)
                                for f in found):
            return []
        calls = [_call_of(f, names) for f in found]
        return calls if all(calls) else []


HERMES = ToolParser("hermes", "<tool_call>", "</tool_call>")
LLAMA3 = ToolParser("llama3", key="parameters")
MISTRAL = ToolParser("mistral", "[TOOL_CALLS]", listed=True)


def parser_for(template: str | None) -> ToolParser:
    """The parser of the call format a chat template teaches: Mistral's ``[TOOL_CALLS]``, Llama 3's
    ``"parameters"`` objects (its templates write ``<|python_tag|>`` or ask for "parameters"), else Hermes'
    ``<tool_call>`` blocks."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if HERMES.open not in text and ("<|python_tag|>" in text or '"parameters"' in text):
        return LLAMA3
    return HERMES


def _marker(text: str, ids: dict[str, int | None]) -> str:
    """A call marker as a Lark item: its token (``<[id]>``) where the vocabulary has one, else its text."""
    token = ids.get(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def _call_schema(function: dict, key: str = "arguments") -> dict:
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, key: parameters},
            "required": ["name", key], "additionalProperties": False}


def _call_of(found, names: set[str]) -> dict | None:
    """OpenAI's tool call of a parsed call object (None: not an object naming an offered function)."""
    if not isinstance(found, dict) or found.get("name") not in names:
        return None
    arguments = found.get("arguments", found.get("parameters", {}))
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": found["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as chat templates take them: an assistant's calls with their ``arguments`` as objects (OpenAI
    sends a JSON string; Hugging Face templates write ``arguments | tojson``), a missing content as ""."""
    out = []
    for message in messages:
        message = {**message, "content": message.get("content") or ""}
        if message.get("tool_calls"):
            message["tool_calls"] = [{**call, "function": {**call["function"],
                                                           "arguments": _arguments(call["function"]["arguments"])}}
                                     for call in message["tool_calls"]]
        out.append(message)
    return out


def _arguments(text: str):
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError("tool_calls: function.arguments is not JSON; send the arguments the model gave") from None
