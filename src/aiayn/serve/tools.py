"""Tool calling on /v1/chat/completions (OpenAI's ``tools`` and ``tool_choice``), for models whose chat template
takes ``tools``, in the call format the template teaches (``CallFormat``, chosen from the template's text):

    <tool_call>                                                   Hermes: Qwen2.5, Qwen3, Hermes 2 Pro, SmolLM2
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

    {"name": "get_weather", "parameters": {"city": "Paris"}}      Llama 3.1-3.3 (JSON tool calls)

    [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}]     Mistral

This module turns the request into what the template and the engine take (tools as JSON schemas; assistant
calls with their arguments as objects, as Hugging Face templates expect; for ``required`` or a named function,
a grammar whose calls follow the functions' parameter schemas) and the model's text back into OpenAI's
``tool_calls`` (streamed: ``serve/toolstream.py``). No web imports.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from aiayn.decoding.constraint import styled


@dataclass(frozen=True)
class CallFormat:
    """How a model family writes its calls: the marker before a call (or before the list of calls) and after it,
    the key of the arguments, and whether the calls are one JSON list."""

    name: str
    open: str | None = None
    close: str | None = None
    key: str = "arguments"
    listed: bool = False


HERMES = CallFormat("hermes", "<tool_call>", "</tool_call>")
LLAMA3 = CallFormat("llama3", key="parameters")
MISTRAL = CallFormat("mistral", "[TOOL_CALLS]", listed=True)
OPEN, CLOSE = HERMES.open, HERMES.close
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)  # one Markdown code block, the whole reply
LEADS = ("<|python_tag|>", "[TOOL_CALLS]")  # markers a whole-reply call may start with (Llama 3's, Mistral's)
BARE = ("{", "[", "`", *LEADS)  # how a reply that is a bare, fenced or marked JSON call starts


def held_back(text: str, marker: str) -> int:
    """How many of ``text``'s last characters may be the start of ``marker`` (held until the next piece says)."""
    return max((k for k in range(1, len(marker)) if text.endswith(marker[:k])), default=0)


def call_format(template: str | None) -> CallFormat:
    """The call format a chat template teaches: Mistral's ``[TOOL_CALLS]``, Llama 3's ``"parameters"`` objects
    (its templates write ``<|python_tag|>`` or ask for "parameters"), else Hermes' ``<tool_call>`` blocks."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if OPEN not in text and ("<|python_tag|>" in text or '"parameters"' in text):
        return LLAMA3
    return HERMES


def call_grammar(tools: list[dict], choice: str | dict, marker_ids: dict[str, int | None] | None = None,
                 answer: dict | None = None, fmt: CallFormat = HERMES) -> str | None:
    """The grammar (llguidance's Lark dialect) that ``tool_choice`` imposes: ``required``, one call to any of
    ``tools``; a named function, one call to it; its arguments follow the function's parameter schema; written in
    ``fmt``. ``auto``: None (the model chooses), or with an ``answer`` schema (``response_format``), a call or that
    answer; ``none``: None. ``marker_ids``: the ids of the format's markers where the vocabulary has each as one
    added token (Qwen2.5's ``<tool_call>``): the grammar asks for that token, the one the model learnt to write,
    not its characters. A required or named call with an ``answer`` is a ValueError: the two cannot both hold."""
    if choice == "none" or (choice == "auto" and answer is None):
        return None
    if choice != "auto" and answer is not None:
        raise ValueError("response_format: not with a required or named tool_choice (the reply is a call)")
    wanted = [choice["function"]["name"]] if isinstance(choice, dict) else [t["function"]["name"] for t in tools]
    schemas = [_call_schema(t["function"], fmt.key) for t in tools if t["function"]["name"] in wanted]
    body = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    body = styled({"type": "array", "items": body, "minItems": 1, "maxItems": 1} if fmt.listed else body)
    start, end = (None if m is None else _marker(m, marker_ids or {}) for m in (fmt.open, fmt.close))
    rules = " ".join(part for part in (start, '"\\n"' if end else None, "call", '"\\n"' if end else None, end)
                     if part) + f"\ncall: %json {json.dumps(body)}"
    if answer is None:
        return f"start: {rules}"
    return f"start: answer | {rules}\nanswer: %json {json.dumps(styled(answer))}"


def _marker(text: str, ids: dict[str, int | None]) -> str:
    """A call marker as a Lark item: its token (``<[id]>``) where the vocabulary has one, else its text."""
    token = ids.get(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def _call_schema(function: dict, key: str = "arguments") -> dict:
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, key: parameters},
            "required": ["name", key], "additionalProperties": False}


def parse_calls(text: str, names: set[str]) -> tuple[str | None, list[dict]]:
    """The model's text -> (the content outside its calls, or None if there is none; OpenAI's ``tool_calls``).
    A call that does not parse as JSON, or names no function offered, stays in the content as text."""
    calls, kept, at = [], [], 0
    for found in _CALL.finditer(text):
        call = _call(found.group(1), names)
        if call is None:
            continue
        kept.append(text[at:found.start()])
        at = found.end()
        calls.append(call)
    kept.append(text[at:])
    content = "".join(kept).strip()
    return (content or None), calls


def bare_calls(text: str, names: set[str]) -> list[dict]:
    """Calls a model wrote as its whole reply: one JSON object, or a list of them, bare, in one Markdown fence or
    after Llama 3's ``<|python_tag|>`` or Mistral's ``[TOOL_CALLS]``, each naming an offered function with its
    ``arguments`` (or Llama 3's ``parameters``). Anything else, a name not offered or text beside the JSON, is no
    call: not guessed."""
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


def _call(body: str, names: set[str]) -> dict | None:
    try:
        return _call_of(json.loads(body), names)
    except ValueError:
        return None


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
