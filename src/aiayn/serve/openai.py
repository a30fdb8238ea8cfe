"""The OpenAI-compatible entry point: GET /v1/models, POST /v1/completions, /v1/chat/completions (decoder-only
models) and /v1/embeddings (encoder-only models), as the official client libraries call them.

It is kept apart from the engine: a request becomes one scheduler job per choice (``n``), whose
token events this module turns into OpenAI's JSON or its Server-Sent Events (``data: {chunk}`` ... ``data:
[DONE]``). Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: a field aiayn does
not implement is refused by name (400), never ignored.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aiayn.inference.generator import TextGenerator
from aiayn.serve.choices import Calls
from aiayn.serve.declared import declare, declare_fields
from aiayn.serve.limits import Limits
from aiayn.serve.openai_text import OpenAIError, TextRoutes
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.tools import template_messages


class Sampling(BaseModel):
    """The sampling fields both text endpoints take (OpenAI's names and defaults)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)  # unset: the server's (generation.json), else OpenAI's 1
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2 ** 53)  # exact in JSON, as the decoding config takes it
    ignore_eos: bool = False  # vLLM's: go on past the end-of-sequence token, to max_tokens (load tests)
    stream: bool = False
    # include_usage: a last chunk with the usage; continuous_usage_stats (vLLM's): the usage so far in every chunk
    stream_options: dict[Literal["include_usage", "continuous_usage_stats"], bool] | None = None
    user: str | None = None  # the caller's end-user id: accepted, not used
    response_format: ResponseFormat | None = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(max_length=64)
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class JsonSchemaResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


# ``{"type": "text" | "json_object"}`` or ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``:
# the output is JSON (following the schema), by constrained decoding
ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaResponse, Field(discriminator="type")]


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]  # a prompt as token ids


class CompletionRequest(Sampling):
    # text or token ids, one prompt or several (evaluation harnesses send ids)
    prompt: str | Annotated[list[str], Field(min_length=1)] | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
    max_tokens: int | None = Field(None, ge=0)  # 0: nothing generated (with echo and logprobs: the prompt scored)
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False  # the prompt comes back before the completion, with its tokens' log-probabilities


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class TextMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user"]
    content: str
    name: str | None = None


class AssistantMessage(BaseModel):
    """An earlier answer: its text, or the tool calls it made (or both)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["assistant"]
    content: str | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(BaseModel):
    """A tool's result, answering the call ``tool_call_id``."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["tool"]
    content: str
    tool_call_id: str


ChatMessage = Annotated[TextMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None  # a JSON schema of the arguments
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionSpec


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: ChosenFunction


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = Field(None, max_length=64)
    tool_choice: Literal["auto", "none", "required"] | ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # accepted; a call constrained by the grammar is one call
    # more variables of the chat template (vLLM's name), as Qwen3's {"enable_thinking": false}
    chat_template_kwargs: dict[str, bool | int | float | str] | None = Field(None, max_length=16)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


async def parse(request: Request, schema: type[BaseModel]) -> BaseModel:
    """The request's JSON body as ``schema``, or a 400 naming the field (an unknown one included)."""
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, a number of too many digits
        raise OpenAIError(400, "the body is not valid JSON (or nested too deep, or a number too long)") from None
    try:
        return schema.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ())) or None
        if first.get("type") == "extra_forbidden":
            raise OpenAIError(400, f"{field}: not supported by this server", field, "unsupported_field") from None
        raise OpenAIError(400, f"{field}: {first.get('msg', 'invalid')}", field) from None


def add_openai_routes(app: FastAPI, name: str, limits: Limits, generator: TextGenerator | None = None,
                      batcher: Scheduler | None = None, embed=None) -> None:
    """Mount /v1 on ``app`` for the model served as ``name``: the text routes with a ``generator`` and its
    ``batcher``, /v1/embeddings with ``embed`` (an async function from texts to a (N, D) tensor)."""

    @app.exception_handler(OpenAIError)
    async def openai_error(_request: Request, err: OpenAIError):
        return err.response()

    declare(app, {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatRequest,
                  "/v1/embeddings": EmbeddingRequest})

    names = [name, *(() if generator is None or generator.model.adapter_rows is None else
                     generator.model.adapter_rows.names)]
    text = {"model": {"enum": names}, "max_tokens": {"maximum": limits.max_new_tokens}}  # another model is a 404
    declare_fields(app, {"CompletionRequest": text, "EmbeddingRequest": {"model": {"enum": [name]}},
                         "ChatRequest": {**text, "max_completion_tokens": {"maximum": limits.max_new_tokens}}})
    context = None if batcher is None else batcher.capacity

    @app.get("/v1/models")
    async def models() -> dict:
        """The model served and each LoRA adapter served beside it, with the context they take
        (``max_model_len``, vLLM's name)."""
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "aiayn",
                                            **({"max_model_len": context} if context else {}),
                                            **({"parent": name} if n != name else {})} for n in names]}

    if generator is not None:
        _add_text_routes(app, names, TextRoutes(name, generator, batcher, limits), generator)
    if embed is not None:
        _add_embeddings(app, name, limits, embed)


def check_model(model: str, names: list[str] | str) -> int:
    """Which of the models served a request names: 0 the base, k its k-th LoRA adapter; another is 404, as
    OpenAI answers it."""
    names = [names] if isinstance(names, str) else names
    if model not in names:
        raise OpenAIError(404, f"model {model!r} does not exist; this server serves {', '.join(map(repr, names))}",
                          "model", "model_not_found")
    return names.index(model)


def _add_text_routes(app: FastAPI, names: list[str], texts: TextRoutes, generator: TextGenerator) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request):
        req = await parse(request, CompletionRequest)
        adapter = check_model(req.model, names)
        ids, shown = texts.completion_prompts(req.prompt)
        return await texts.complete(request, req, ids, shown, adapter)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        req = await parse(request, ChatRequest)
        adapter = check_model(req.model, names)
        tools, choice = chat_tools(req)
        try:
            messages = template_messages([m.model_dump(exclude_none=True) for m in req.messages])
            prompt = generator.chat_prompt(messages, tools if choice != "none" else None, req.chat_template_kwargs)
        except ValueError as err:
            field = "tools" if str(err).startswith("tools") else "messages"
            raise OpenAIError(400, str(err) if field == "tools" else f"messages: {err}", field) from None
        texts.check_size([prompt], "messages")
        ids = generator.rendered_ids(prompt)
        top = (req.top_logprobs or 0) if req.logprobs else None
        calls = Calls(tools, choice, generator.tokenizer) if tools and choice != "none" else None
        return await texts.answer(request, req, [ids], "chat.completion", top, calls, adapter)


def chat_tools(req: ChatRequest) -> tuple[list[dict] | None, str | dict]:
    """The request's tools (OpenAI's function specs) and its ``tool_choice`` (default: ``auto`` with tools, else
    ``none``); a choice that names no function offered is a 400."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice or ("auto" if tools else "none")
    if not isinstance(choice, str):
        choice = choice.model_dump()
    if choice != "none" and not tools and choice != "auto":
        raise OpenAIError(400, "tool_choice: give tools to choose from", "tool_choice")
    if isinstance(choice, dict) and choice["function"]["name"] not in {t["function"]["name"] for t in tools}:
        raise OpenAIError(400, f"tool_choice: no function named {choice['function']['name']!r} in tools",
                          "tool_choice")
    return tools, choice


def _add_embeddings(app: FastAPI, name: str, limits: Limits, embed) -> None:
    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict:
        req = await parse(request, EmbeddingRequest)
        check_model(req.model, name)
        inputs = [req.input] if isinstance(req.input, str) else req.input
        if not inputs or len(inputs) > limits.max_texts or any(len(t) > limits.max_chars for t in inputs):
            raise OpenAIError(400, f"input: 1 to {limits.max_texts} texts of at most {limits.max_chars} "
                                   "characters", "input")
        vectors, tokens = await embed(inputs)
        data = [{"object": "embedding", "index": i,
                 "embedding": vector.tolist() if req.encoding_format == "float" else
                 base64.b64encode(vector.float().numpy().astype("<f4").tobytes()).decode()}
                for i, vector in enumerate(vectors)]
        return {"object": "list", "data": data, "model": name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
