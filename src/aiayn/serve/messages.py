"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (what the ``anthropic`` SDK, Claude Code
and the tools built on them call), stateless.

A request is turned into the chat request it means (``system`` a system message, and a ``system`` turn inside the
messages, as Claude Code sends one, one where it stands; a user's ``tool_result`` blocks tool messages; an
assistant's ``tool_use`` blocks its tool calls; ``tools`` with ``input_schema`` OpenAI's functions;
``tool_choice`` auto / any / tool / none; ``thinking`` the template's ``enable_thinking``) and answered by
/v1/chat/completions' path (``serve/openai_chat.py``), so the same tokens come back. Its answer, or its stream's
chunks, become the Message and its events (``message_start`` ... ``content_block_delta`` ... ``message_stop``).
Errors have Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from aiayn.serve.message_object import events, message
from aiayn.serve.openai_chat import chat_answer, chat_tools, rendered
from aiayn.serve.openai_schema import FUNCTION_NAME, ChatRequest, OpenAIError, check_model, parse
from aiayn.serve.openai_text import TextRoutes

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


class AnthropicBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cache_control: dict | None = None  # accepted: the prompt cache keeps every prompt's blocks anyway


class AnthropicText(AnthropicBlock):
    type: Literal["text"]
    text: str
    citations: list | None = None


class AnthropicToolUse(AnthropicBlock):
    """A call the model made earlier (as its answer gave it)."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict


class AnthropicToolResult(AnthropicBlock):
    """A tool's result, answering the call ``tool_use_id``."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[AnthropicText] = ""
    is_error: StrictBool | None = None


class AnthropicThinking(AnthropicBlock):
    """An earlier answer's thinking: not sent back to the template (as chat templates drop it)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class AnthropicUserTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user"]
    content: str | list[Annotated[AnthropicText | AnthropicToolResult, Field(discriminator="type")]]


class AnthropicAssistantTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["assistant"]
    content: str | list[Annotated[AnthropicText | AnthropicToolUse | AnthropicThinking, Field(discriminator="type")]]


class AnthropicSystemTurn(BaseModel):
    """A system message inside the conversation (Claude Code sends its environment so): the template's system
    turn at that place (a template that takes none there refuses it: a 400)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system"]
    content: str | list[AnthropicText]


Message = Annotated[AnthropicUserTurn | AnthropicAssistantTurn | AnthropicSystemTurn, Field(discriminator="role")]


class AnthropicTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    input_schema: dict
    type: Literal["custom"] | None = None
    cache_control: dict | None = None
    defer_loading: StrictBool | None = None  # a tool not shown to the model until a tool search loads it: left out
    strict: StrictBool | None = None  # accepted: a forced call follows its schema anyway (the grammar)


class AnthropicToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: StrictBool | None = None  # accepted: a call the grammar forces is one call


class ThinkingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["enabled", "disabled", "adaptive"]  # adaptive: the template's own default
    budget_tokens: int | None = Field(None, ge=1)
    display: Literal["summarized", "omitted"] | None = None  # accepted: the thinking comes back as generated


class Conversation(BaseModel):
    """What ``count_tokens`` takes: the prompt's parts."""

    model_config = ConfigDict(extra="forbid")
    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[AnthropicText] | None = None
    tools: list[AnthropicTool] | None = Field(None, max_length=64)
    tool_choice: AnthropicToolChoice | None = None
    thinking: ThinkingConfig | None = None
    context_management: dict | None = None  # accepted: earlier thinking is never rendered again anyway
    output_config: dict | None = None  # accepted (Claude Code's effort): nothing to set on these models


class MessagesRequest(Conversation):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = Field(None, max_length=16)
    temperature: float | None = Field(None, ge=0.0, le=1.0)  # unset: the server's (generation.json)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, str | None] | None = Field(None, max_length=16)
    cache_control: dict | None = None  # accepted: the prompt cache keeps every prompt's blocks anyway
    stream: StrictBool = False


def chat_request(req: Conversation, limit: int | None = None) -> ChatRequest:
    """The chat request an Anthropic request means (400 for what it cannot mean). ``max_tokens`` is required and
    clients ask for many (Claude Code 32,000): above the server's ``limit`` it is the end of the turn, as far as
    the limit and the context go."""
    body = {"model": req.model, "messages": chat_messages(req)}
    if tools := [t for t in req.tools or () if not t.defer_loading]:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "parameters": t.input_schema,
                                                           **({"description": t.description} if t.description
                                                              else {})}} for t in tools]
    if req.tool_choice is not None:
        choice = req.tool_choice
        if choice.type == "tool" and not choice.name:
            raise OpenAIError(400, "tool_choice.name: name the tool for type tool", "tool_choice")
        body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or \
            {"type": "function", "function": {"name": choice.name}}
    if req.thinking is not None and req.thinking.type != "adaptive":  # Qwen3's variable (others ignore it)
        body["chat_template_kwargs"] = {"enable_thinking": req.thinking.type == "enabled"}
    if isinstance(req, MessagesRequest):
        clamped = limit is not None and req.max_tokens > limit
        body.update(max_completion_tokens=None if clamped else req.max_tokens, temperature=req.temperature,
                    top_p=req.top_p, top_k=req.top_k, stop=req.stop_sequences, stream=req.stream,
                    stream_options={"include_usage": True} if req.stream else None,
                    user=(req.metadata or {}).get("user_id"))
    try:
        return ChatRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as err:
        raise OpenAIError(400, f"messages: {err.errors()[0].get('msg', 'invalid')}", "messages") from None


def chat_messages(req: Conversation) -> list[dict]:
    """The conversation as chat messages: a user turn's ``tool_result`` blocks are tool messages (before its
    text), an assistant turn's ``tool_use`` blocks its tool calls."""
    out = [{"role": "system", "content": _text(req.system)}] if req.system else []
    for turn in req.messages:
        blocks = [AnthropicText(type="text", text=turn.content)] if isinstance(turn.content, str) else \
            turn.content
        text = _text([b for b in blocks if b.type == "text"])
        if turn.role == "system":
            out.append({"role": "system", "content": text})
            continue
        if turn.role == "assistant":
            calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                     for b in blocks if b.type == "tool_use"]
            out.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
            continue
        results = [b for b in blocks if b.type == "tool_result"]
        out += [{"role": "tool", "tool_call_id": b.tool_use_id, "content": _text(b.content)} for b in results]
        if text or not results:
            out.append({"role": "user", "content": text})
    return out


def _text(content: str | list[AnthropicText]) -> str:
    return content if isinstance(content, str) else "".join(block.text for block in content)


def anthropic_error(err: OpenAIError) -> JSONResponse:
    """An error of the chat path in Anthropic's shape (its status kept)."""
    kind = ERROR_TYPES.get(err.status, "api_error")
    return JSONResponse({"type": "error", "error": {"type": kind, "message": err.message}}, status_code=err.status)


def add_messages_routes(app: FastAPI, names: list[str], texts: TextRoutes) -> None:
    """Mount /v1/messages and /v1/messages/count_tokens for the models ``names`` (the base and its adapters)."""

    @app.post("/v1/messages")
    async def messages(request: Request):
        try:
            req = await parse(request, MessagesRequest)
            chat, mid = chat_request(req, texts.limits.max_new_tokens), f"msg_{uuid.uuid4().hex}"
            if req.stream:
                return await chat_answer(request, chat, names, texts, lambda chunks: events(req, mid, chunks))
            answer = await chat_answer(request, chat, names, texts)
        except OpenAIError as err:
            return anthropic_error(err)
        return message(req, mid, answer) if isinstance(answer, dict) else answer  # else the client went away

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request):
        """The prompt's tokens as the model's own template and tokenizer render it (tools included)."""
        try:
            req = await parse(request, Conversation)
            chat = chat_request(req)
            check_model(chat.model, names)
            tools, choice = chat_tools(chat)
            _, ids = rendered(chat, texts.generator, tools, choice)
        except OpenAIError as err:
            return anthropic_error(err)
        return {"input_tokens": len(ids)}
