"""Tool calling on /v1/chat/completions (OpenAI's ``tools`` and ``tool_choice``), for models whose chat template
takes ``tools`` and which answer with Hermes-style calls (Qwen2.5, Hermes 2 Pro, SmolLM2's template family):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

This module turns the request into what the template and the engine take (tools as JSON schemas; assistant
calls with their arguments as objects, as Hugging Face templates expect; for ``required`` or a named function,
a grammar whose calls follow the functions' parameter schemas) and the model's text back into OpenAI's
``tool_calls``, whole or as streamed deltas. No web imports.
"""

from __future__ import annotations

import json
import re
import uuid

from aiayn.decoding.constraint import styled

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)  # one Markdown code block, the whole reply
BARE = ("{", "[", "`")  # how a reply that is a bare or fenced JSON call starts


def call_grammar(tools: list[dict], choice: str | dict, marker_ids: dict[str, int | None] | None = None,
                 answer: dict | None = None) -> str | None:
    """The grammar (llguidance's Lark dialect) that ``tool_choice`` imposes: ``required``, one call to any of
    ``tools``; a named function, one call to it; its ``arguments`` follow the function's parameter schema.
    ``auto``: None (the model chooses), or with an ``answer`` schema (``response_format``), a call or that answer;
    ``none``: None. ``marker_ids``: the ids of ``<tool_call>`` and ``</tool_call>`` where the vocabulary has each
    as one added token (Qwen2.5's, Qwen3's): the grammar asks for that token, the one the model learnt to write,
    not its characters. A required or named call with an ``answer`` is a ValueError: the two cannot both hold."""
    if choice == "none" or (choice == "auto" and answer is None):
        return None
    if choice != "auto" and answer is not None:
        raise ValueError("response_format: not with a required or named tool_choice (the reply is a call)")
    wanted = [choice["function"]["name"]] if isinstance(choice, dict) else [t["function"]["name"] for t in tools]
    schemas = [_call_schema(t["function"]) for t in tools if t["function"]["name"] in wanted]
    body = styled(schemas[0] if len(schemas) == 1 else {"anyOf": schemas})
    start, end = (_marker(m, marker_ids or {}) for m in (OPEN, CLOSE))
    rules = f'{start} "\\n" call "\\n" {end}\ncall: %json {json.dumps(body)}'
    if answer is None:
        return f"start: {rules}"
    return f"start: answer | {rules}\nanswer: %json {json.dumps(styled(answer))}"


def _marker(text: str, ids: dict[str, int | None]) -> str:
    """A call marker as a Lark item: its token (``<[id]>``) where the vocabulary has one, else its text."""
    token = ids.get(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def _call_schema(function: dict) -> dict:
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


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
    """Calls a model wrote without ``<tool_call>`` markers (``tool_choice: auto``): the whole reply one JSON object,
    or a list of them, bare or in one Markdown fence, each naming an offered function with its ``arguments`` (or
    Llama 3's ``parameters``). Anything else, a name not offered or text beside the JSON, is no call: not
    guessed."""
    body = _FENCE.fullmatch(text.strip())
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


class ToolStream:
    """Streaming: text outside calls passes as content; a call is held from ``<tool_call>`` until its
    ``</tool_call>``, then given as one tool-call delta (OpenAI's ``delta.tool_calls[i]`` with its id, name and
    arguments whole). Text that could still become ``<tool_call>`` is held until it cannot."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.held, self.count = names, "", 0
        self.bare = True  # nothing sent yet: the whole reply may still be a bare or fenced JSON call

    def add(self, piece: str) -> tuple[str, list[dict]]:
        """(content that may be sent now, tool-call deltas completed by ``piece``)."""
        self.held += piece
        if self.bare and (not self.held.strip() or self.held.lstrip().startswith(BARE)):
            return "", []  # held whole until the end: a reply that is one JSON call (flush decides)
        self.bare = False
        content, deltas = "", []
        while True:
            start = self.held.find(OPEN)
            if start < 0:
                keep = max((k for k in range(1, len(OPEN)) if self.held.endswith(OPEN[:k])), default=0)
                content, self.held = content + self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
                return content, deltas
            end = self.held.find(CLOSE, start)
            if end < 0:
                content, self.held = content + self.held[:start], self.held[start:]
                return content, deltas
            content += self.held[:start]
            whole, self.held = self.held[start:end + len(CLOSE)], self.held[end + len(CLOSE):]
            text, calls = parse_calls(whole, self.names)
            content += text or ""
            deltas.extend(self._delta(call) for call in calls)

    def flush(self) -> tuple[str, list[dict]]:
        """At the end: a reply held whole that is one bare or fenced JSON call (or a list of them) becomes those
        calls; anything else held (an unfinished call, other JSON) goes out as content."""
        rest, self.held = self.held, ""
        calls = bare_calls(rest, self.names) if self.bare else []
        return ("", [self._delta(call) for call in calls]) if calls else (rest, [])

    def _delta(self, call: dict) -> dict:
        self.count += 1
        return {"index": self.count - 1, **call}


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
