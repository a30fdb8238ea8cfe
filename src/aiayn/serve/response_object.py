"""The Responses API's answer (``serve/responses.py`` takes its requests): the Response object and its output items
(a message, function calls, a reasoning part) made from a chat answer, and a chat stream's chunks as the typed events
the Agents SDK reads."""

from __future__ import annotations

import json
import uuid
from itertools import count

from pydantic import BaseModel


def message_item(text: str, status: str = "completed") -> dict:
    """An answer's text as the output's message item."""
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def reasoning_item(text: str, status: str = "completed") -> dict:
    """A reasoning model's thinking part as the output's reasoning item."""
    return {"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}]}


def call_item(call: dict, status: str = "completed") -> dict:
    """A chat tool call as the output's ``function_call`` item."""
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": status}


def mcp_item(call: dict) -> dict:
    """A call the server's MCP tools ran (``serve/mcp_loop.py``) as the output's ``mcp_call`` item (OpenAI's remote
    MCP tool's shape): its output, or the tool's error."""
    failed = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": call["result"]}]}
    return {"type": "mcp_call", "id": f"mcp_{uuid.uuid4().hex}", "server_label": call["server"], "name": call["name"],
            "arguments": call["arguments"], "output": None if call["is_error"] else call["result"],
            "error": failed if call["is_error"] else None, "status": "failed" if call["is_error"] else "completed"}


def response(req, rid: str, created: int, output: list[dict], finish: str | None,
             usage: dict | None) -> dict:
    """The Response object: ``status`` completed, or incomplete at ``max_output_tokens`` (``in_progress`` while
    ``finish`` is None)."""
    status = "in_progress" if finish is None else "incomplete" if finish == "length" else "completed"
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    fmt = {"type": "text"} if req.text is None or req.text.format is None else \
        req.text.format.model_dump(by_alias=True, exclude_none=True)
    return {"id": rid, "object": "response", "created_at": created, "status": status, "model": req.model,
            "output": output, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "metadata": req.metadata or {}, "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": None, "store": False, "temperature": req.temperature, "top_p": req.top_p,
            "text": {"format": fmt}, "tool_choice": _choice(req.tool_choice), "tools": tools,
            "truncation": "disabled", "user": req.user, "usage": None if usage is None else _usage(usage)}


def _choice(choice) -> str | dict:
    return choice.model_dump() if isinstance(choice, BaseModel) else choice or "auto"


def _usage(usage: dict) -> dict:
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens_details": {"reasoning_tokens": 0}}


async def events(req, rid: str, created: int, chunks):
    """A chat stream's chunks as the Responses API's typed events, each ``event: TYPE`` and ``data: {...}`` with
    its ``sequence_number``: the output's items opened, their text or arguments in deltas, closed, then
    ``response.completed`` (or ``response.incomplete``) with the whole Response."""
    numbers, items = count(), Items()

    def event(kind: str, **fields) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(numbers), **fields})}\n\n"

    yield event("response.created", response=response(req, rid, created, [], None, None))
    yield event("response.in_progress", response=response(req, rid, created, [], None, None))
    finish, usage = None, None
    async for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta, finish = choice["delta"], choice["finish_reason"] or finish
            for kind, fields in items.text(delta.get("reasoning_content") or "", "reasoning") + \
                    items.text(delta.get("content") or ""):
                yield event(kind, **fields)
            for call in delta.get("tool_calls", []):
                for kind, fields in items.call(call):
                    yield event(kind, **fields)
            for call in delta.get("mcp_calls", []):  # run by the server: an item given whole
                for kind, fields in items.whole(mcp_item(call)):
                    yield event(kind, **fields)
    for kind, fields in items.close():
        yield event(kind, **fields)
    done = response(req, rid, created, items.output, finish or "stop", usage)
    yield event("response.incomplete" if done["status"] == "incomplete" else "response.completed", response=done)


class Items:
    """The output items of a streamed Response as its chunks arrive: the events that open an item, add to it
    and close it (one item open at a time: a message's text, or one function call)."""

    def __init__(self) -> None:
        self.output: list[dict] = []
        self.open: dict | None = None

    def text(self, text: str, kind: str = "message") -> list[tuple[str, dict]]:
        """The events of a piece of the answer's text (``kind`` message) or of its thinking (reasoning)."""
        if not text:
            return []
        out = [] if self.open is not None and self.open["type"] == kind else self.close()
        if self.open is None:
            item = message_item("", "in_progress") if kind == "message" else reasoning_item("", "in_progress")
            out += self._add(item)
            if kind == "message":
                out.append(("response.content_part.added", {**self._where(), "content_index": 0,
                                                            "part": {**item["content"][0]}}))
        self.open["content"][0]["text"] += text
        extra = {"logprobs": []} if kind == "message" else {}
        name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        return [*out, (name, {**self._where(), "content_index": 0, "delta": text, **extra})]

    def call(self, call: dict) -> list[tuple[str, dict]]:
        out = []
        if "id" in call:  # a new call: its name first
            out = self.close()
            out += self._add(call_item({**call, "function": {**call["function"], "arguments": ""}}, "in_progress"))
        fragment = call.get("function", {}).get("arguments", "")
        if fragment and self.open is not None:
            self.open["arguments"] += fragment
            out.append(("response.function_call_arguments.delta", {**self._where(), "delta": fragment}))
        return out

    def whole(self, item: dict) -> list[tuple[str, dict]]:
        """An item given whole (a call the server ran): added and done at once."""
        out = [*self.close(), *self._add(item)]
        self.open = None
        return [*out, ("response.output_item.done", {"output_index": len(self.output) - 1, "item": item})]

    def close(self) -> list[tuple[str, dict]]:
        item, self.open = self.open, None
        if item is None:
            return []
        item["status"] = "completed"
        where = {"item_id": item["id"], "output_index": len(self.output) - 1}
        if item["type"] == "message":
            part = item["content"][0]
            out = [("response.output_text.done", {**where, "content_index": 0, "text": part["text"], "logprobs": []}),
                   ("response.content_part.done", {**where, "content_index": 0, "part": part})]
        elif item["type"] == "reasoning":
            out = [("response.reasoning_text.done", {**where, "content_index": 0,
                                                     "text": item["content"][0]["text"]})]
        else:
            out = [("response.function_call_arguments.done", {**where, "name": item["name"],
                                                              "arguments": item["arguments"]})]
        return [*out, ("response.output_item.done", {"output_index": where["output_index"], "item": item})]

    def _add(self, item: dict) -> list[tuple[str, dict]]:
        self.output.append(item)
        self.open = item
        return [("response.output_item.added", {"output_index": len(self.output) - 1, "item": json.loads(
            json.dumps(item))})]

    def _where(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1}
