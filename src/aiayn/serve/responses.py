"""POST /v1/responses: OpenAI's Responses API (what the OpenAI Agents SDK calls by default), stateless.

A request is turned into the chat request it means (``instructions`` a system message; ``input`` items messages,
an assistant's ``function_call`` items its tool calls, ``function_call_output`` items tool messages; flat function
tools OpenAI's nested ones; ``text.format`` a ``response_format``) and answered by /v1/chat/completions' path
(``serve/openai_chat.py``); its answer, or its stream's chunks, become the Response object and its typed
events (``response.created`` ... ``response.output_text.delta`` ... ``response.completed``). Nothing is stored:
``store`` is answered false and ``previous_response_id`` is refused by name; send the whole conversation.
"""

from __future__ import annotations

import json
import time
import uuid
from itertools import count
from typing import Annotated, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from aiayn.serve.openai_chat import chat_answer
from aiayn.serve.openai_schema import ChatRequest, JsonObjectFormat, TextFormat, parse
from aiayn.serve.openai_text import OpenAIError, TextRoutes


class Part(BaseModel):
    """A text part of a message: ``input_text`` (what a user wrote), ``output_text`` (an earlier answer)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list | None = None
    logprobs: list | None = None


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[Part]
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class FunctionCallItem(BaseModel):
    """A call the model made earlier (as its answer gave it)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(BaseModel):
    """A function's result, answering the call ``call_id``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]
    id: str | None = None
    status: str | None = None


def _item_kind(item) -> str:
    return (item.get("type") if isinstance(item, dict) else getattr(item, "type", None)) or "message"


Item = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")] |
                 Annotated[FunctionCallOutputItem, Tag("function_call_output")], Discriminator(_item_kind)]


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class FunctionChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str


class SchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(max_length=64)
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Annotated[TextFormat | JsonObjectFormat | SchemaFormat, Field(discriminator="type")] | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    input: Annotated[str, Field(min_length=1)] | Annotated[list[Item], Field(min_length=1)]
    instructions: str | None = None  # a system message before the input
    tools: list[FunctionTool] | None = Field(None, max_length=64)
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool = False
    store: bool | None = None  # accepted; nothing is stored (the answer says "store": false)
    # refused by name (nothing is stored; no extra output data is offered): the schema says null and []
    previous_response_id: str | None = Field(None, json_schema_extra={"type": "null"})
    include: list[str] | None = Field(None, max_length=8, json_schema_extra={"maxItems": 0})
    metadata: dict[str, str] | None = Field(None, max_length=16)  # given back in the answer
    truncation: Literal["disabled"] | None = None
    user: str | None = None


def add_responses_route(app: FastAPI, names: list[str], texts: TextRoutes) -> None:
    @app.post("/v1/responses")
    async def responses(request: Request):
        req = await parse(request, ResponsesRequest)
        chat = chat_request(req)
        rid, created = f"resp_{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            return await chat_answer(request, chat, names, texts, lambda chunks: events(req, rid, created, chunks))
        answer = await chat_answer(request, chat, names, texts)
        if not isinstance(answer, dict):  # the client went away
            return answer
        choice = answer["choices"][0]
        text, calls = choice["message"]["content"], choice["message"].get("tool_calls", [])
        thought = choice["message"].get("reasoning_content")
        items = ([_reasoning(thought)] if thought else []) + ([_message(text)] if text else []) + \
            [_call(c) for c in calls]
        return response(req, rid, created, items, choice["finish_reason"], answer["usage"])


def chat_request(req: ResponsesRequest) -> ChatRequest:
    """The chat request a Responses request means (400 for what it cannot mean)."""
    if req.previous_response_id is not None:
        raise OpenAIError(400, "previous_response_id: this server stores no responses; send the whole conversation "
                               "as input", "previous_response_id")
    if req.include:
        raise OpenAIError(400, "include: this server adds no extra output data; send none", "include")
    body = {"model": req.model, "messages": messages(req), "stream": req.stream, "user": req.user,
            "max_completion_tokens": req.max_output_tokens, "temperature": req.temperature, "top_p": req.top_p,
            "parallel_tool_calls": req.parallel_tool_calls,
            "stream_options": {"include_usage": True} if req.stream else None}
    if req.tools:
        body["tools"] = [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                         for t in req.tools]
    if req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice if isinstance(req.tool_choice, str) else \
            {"type": "function", "function": {"name": req.tool_choice.name}}
    if req.text is not None and req.text.format is not None:
        fmt = req.text.format.model_dump(by_alias=True, exclude_none=True)
        body["response_format"] = fmt if fmt["type"] != "json_schema" else \
            {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    try:
        return ChatRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as err:
        raise OpenAIError(400, f"input: {err.errors()[0].get('msg', 'invalid')}", "input") from None


def messages(req: ResponsesRequest) -> list[dict]:
    """The conversation as chat messages: consecutive ``function_call`` items are one assistant turn's calls."""
    out = [{"role": "system", "content": req.instructions}] if req.instructions else []
    for item in [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input:
        if isinstance(item, MessageItem):
            out.append({"role": item.role, "content": _text(item.content)})
        elif isinstance(item, FunctionCallOutputItem):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)})
        else:
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append(
                {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}})
    return out


def _text(content: str | list[Part]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def _message(text: str, status: str = "completed") -> dict:
    """An answer's text as the output's message item."""
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _reasoning(text: str, status: str = "completed") -> dict:
    """A reasoning model's thinking part as the output's reasoning item."""
    return {"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}]}


def _call(call: dict, status: str = "completed") -> dict:
    """A chat tool call as the output's ``function_call`` item."""
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": status}


def response(req: ResponsesRequest, rid: str, created: int, output: list[dict], finish: str | None,
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
    return choice.model_dump() if isinstance(choice, FunctionChoice) else choice or "auto"


def _usage(usage: dict) -> dict:
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens_details": {"reasoning_tokens": 0}}


async def events(req: ResponsesRequest, rid: str, created: int, chunks):
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
            item = _message("", "in_progress") if kind == "message" else _reasoning("", "in_progress")
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
            out += self._add(_call({**call, "function": {**call["function"], "arguments": ""}}, "in_progress"))
        fragment = call.get("function", {}).get("arguments", "")
        if fragment and self.open is not None:
            self.open["arguments"] += fragment
            out.append(("response.function_call_arguments.delta", {**self._where(), "delta": fragment}))
        return out

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
