"""Anthropic's Message (``serve/messages.py`` takes its requests): the Message made from a chat answer, with its
thinking, text and ``tool_use`` blocks (and the calls the server's MCP tools ran, as Anthropic's MCP connector
gives them: ``mcp_tool_use`` and ``mcp_tool_result`` blocks), and a chat stream's chunks as the events the
``anthropic`` SDK reads."""

from __future__ import annotations

import json

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def message(req, mid: str, answer: dict) -> dict:
    """A chat answer as the Message: its thinking, text and ``tool_use`` blocks, the stop reason and the usage."""
    choice = answer["choices"][0]
    said = choice["message"]
    content = [{"type": "thinking", "thinking": said["reasoning_content"], "signature": ""}] \
        if said.get("reasoning_content") else []
    content += [block for call in said.get("mcp_calls", []) for block in mcp_blocks(call)]
    content += [{"type": "text", "text": said["content"]}] if said.get("content") else []
    content += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                 "input": _input(c["function"]["arguments"])} for c in said.get("tool_calls", [])]
    return {"id": mid, "type": "message", "role": "assistant", "model": req.model, "content": content,
            **_stop(choice["finish_reason"], choice.get("stop_reason")), "usage": _usage(answer["usage"])}


def mcp_blocks(call: dict) -> list[dict]:
    """A call the server's MCP tools ran (``serve/mcp_loop.py``) as Anthropic's two blocks: the call, its result."""
    return [{"type": "mcp_tool_use", "id": call["id"], "name": call["name"], "server_name": call["server"],
             "input": _input(call["arguments"])},
            {"type": "mcp_tool_result", "tool_use_id": call["id"], "is_error": call["is_error"],
             "content": [{"type": "text", "text": call["result"]}]}]


def _input(arguments: str) -> dict:
    try:
        found = json.loads(arguments)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _stop(finish: str | None, matched: str | None) -> dict:
    return {"stop_reason": "stop_sequence" if matched else STOP_REASONS.get(finish or "stop", "end_turn"),
            "stop_sequence": matched}


def _usage(usage: dict | None) -> dict:
    """OpenAI's usage as Anthropic's: the prompt tokens the prefix cache served are ``cache_read_input_tokens``,
    the rest ``input_tokens``."""
    usage = usage or {"prompt_tokens": 0, "completion_tokens": 0, "prompt_tokens_details": {"cached_tokens": 0}}
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return {"input_tokens": usage["prompt_tokens"] - cached, "output_tokens": usage["completion_tokens"],
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


async def events(req, mid: str, chunks):
    """A chat stream's chunks as Anthropic's events, each ``event: TYPE`` and ``data: {...}``: ``message_start``,
    each content block started, added to in deltas and stopped (one open at a time), ``message_delta`` with the
    stop reason and the usage, ``message_stop``."""

    def event(kind: str, **fields) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, ensure_ascii=False)}\n\n"

    start = {"id": mid, "type": "message", "role": "assistant", "model": req.model, "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": _usage(None)}
    yield event("message_start", message=start)
    blocks, finish, matched, usage = Blocks(), None, None, None
    async for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            finish, matched = choice["finish_reason"] or finish, choice.get("stop_reason") or matched
            for kind, fields in blocks.thinking(delta.get("reasoning_content")) + blocks.text(delta.get("content")) \
                    + [e for call in delta.get("tool_calls", []) for e in blocks.call(call)] \
                    + [e for call in delta.get("mcp_calls", []) for e in blocks.whole(mcp_blocks(call))]:
                yield event(kind, **fields)
    for kind, fields in blocks.close():
        yield event(kind, **fields)
    yield event("message_delta", delta=_stop(finish, matched), usage=_usage(usage))
    yield event("message_stop")


class Blocks:
    """The content blocks of a streamed Message as its chunks arrive: the events that start one, add to it and
    stop it (a thinking part, the text, or one tool call)."""

    def __init__(self) -> None:
        self.index, self.kind = -1, None

    def thinking(self, text: str | None) -> list[tuple[str, dict]]:
        return self._piece("thinking", {"type": "thinking", "thinking": "", "signature": ""},
                           {"type": "thinking_delta", "thinking": text}) if text else []

    def text(self, text: str | None) -> list[tuple[str, dict]]:
        return self._piece("text", {"type": "text", "text": ""}, {"type": "text_delta", "text": text}) if text \
            else []

    def call(self, call: dict) -> list[tuple[str, dict]]:
        """A chat tool-call delta: a new call (its id) starts a ``tool_use`` block, its arguments are
        ``input_json_delta`` fragments."""
        out = []
        if "id" in call:
            out = self.close() + self._start("tool_use", {"type": "tool_use", "id": call["id"], "input": {},
                                                          "name": call["function"]["name"]})
        fragment = call.get("function", {}).get("arguments", "")
        if fragment and self.kind == "tool_use":
            out.append(("content_block_delta", {"index": self.index, "delta": {"type": "input_json_delta",
                                                                                "partial_json": fragment}}))
        return out

    def whole(self, made: list[dict]) -> list[tuple[str, dict]]:
        """Blocks given whole (a call the server ran, its result): each started and stopped at once."""
        out = self.close()
        for block in made:
            out += [*self._start(block["type"], block), *self.close()]
        return out

    def close(self) -> list[tuple[str, dict]]:
        if self.kind is None:
            return []
        self.kind = None
        return [("content_block_stop", {"index": self.index})]

    def _piece(self, kind: str, block: dict, delta: dict) -> list[tuple[str, dict]]:
        out = [] if self.kind == kind else self.close() + self._start(kind, block)
        return [*out, ("content_block_delta", {"index": self.index, "delta": delta})]

    def _start(self, kind: str, block: dict) -> list[tuple[str, dict]]:
        self.index, self.kind = self.index + 1, kind
        return [("content_block_start", {"index": self.index, "content_block": block})]
