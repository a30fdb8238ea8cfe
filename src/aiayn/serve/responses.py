"""POST /v1/responses: OpenAI's Responses API (what the OpenAI Agents SDK calls by default), stateless.

A request is turned into the chat request it means (``instructions`` a system message; ``input`` items messages,
an assistant's ``function_call`` items its tool calls, ``function_call_output`` items tool messages; flat function
tools OpenAI's nested ones; ``text.format`` a ``response_format``) and answered by /v1/chat/completions' path
(``serve/openai_chat.py``); its answer, or its stream's chunks, become the Response object and its typed
events (``response.created`` ... ``response.output_text.delta`` ... ``response.completed``). Nothing is stored:
``store`` is answered false and ``previous_response_id`` is refused by name; send the whole conversation.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag, ValidationError

from aiayn.serve.declared import LogitBias
from aiayn.serve.openai_chat import chat_answer
from aiayn.serve.openai_schema import (
    ChatRequest,
    FunctionSpec,
    JsonObjectFormat,
    JsonSchemaFormat,
    OpenAIError,
    TextFormat,
    parse,
)
from aiayn.serve.openai_text import TextRoutes
from aiayn.serve.response_object import call_item, events, mcp_item, message_item, reasoning_item, response


class Part(BaseModel):
    """A text part of a message: ``input_text`` (what a user wrote), ``output_text`` (an earlier answer)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list | None = None
    logprobs: list | None = None


class InputItem(BaseModel):
    """An item of ``input``: its own ``id`` and ``status`` (as an earlier answer gave them) are accepted."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    status: str | None = None


class MessageItem(InputItem):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[Part]
    phase: str | None = None


class FunctionCallItem(InputItem):
    """A call the model made earlier (as its answer gave it)."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(InputItem):
    """A function's result, answering the call ``call_id``."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]


def _item_kind(item) -> str:
    return (item.get("type") if isinstance(item, dict) else getattr(item, "type", None)) or "message"


Item = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")] |
                 Annotated[FunctionCallOutputItem, Tag("function_call_output")], Discriminator(_item_kind)]


class FunctionTool(FunctionSpec):
    """A function tool, flat (the chat API nests the same fields under ``function``)."""

    type: Literal["function"]


class FunctionChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str


class SchemaFormat(JsonSchemaFormat):
    """``text.format``'s JSON schema, flat (the chat API nests the same fields under ``json_schema``)."""

    type: Literal["json_schema"]


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
    parallel_tool_calls: StrictBool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    logit_bias: LogitBias | None = None  # not OpenAI's Responses field: its chat one, as the chat route takes it
    stream: StrictBool = False
    store: StrictBool | None = None  # accepted; nothing is stored (the answer says "store": false)
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
        items = ([reasoning_item(thought)] if thought else []) + \
            [mcp_item(c) for c in choice["message"].get("mcp_calls", [])] + \
            ([message_item(text)] if text else []) + [call_item(c) for c in calls]
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
            "parallel_tool_calls": req.parallel_tool_calls, "logit_bias": req.logit_bias,
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
