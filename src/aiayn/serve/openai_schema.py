"""The OpenAI routes' request bodies (OpenAI's field names, defaults and bounds; a field aiayn does not implement
is refused by name), their parsing, and errors in OpenAI's shape (a refusal of the scheduler's among them)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from aiayn.serve.declared import LogitBias
from aiayn.serve.jobs import Refused


class OpenAIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return JSONResponse({"error": {"message": self.message, "type": kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def check_model(model: str, names: list[str] | str) -> int:
    """Which of the models served a request names: 0 the base, k its k-th LoRA adapter; another is 404, as
    OpenAI answers it."""
    names = [names] if isinstance(names, str) else names
    if model not in names:
        raise OpenAIError(404, f"model {model!r} does not exist; this server serves {', '.join(map(repr, names))}",
                          "model", "model_not_found")
    return names.index(model)


def openai_refusal(err: Refused) -> OpenAIError:
    """The scheduler's refusal in OpenAI's shape: 429 when busy, else 400 (a length over the context:
    ``context_length_exceeded``)."""
    refusal = err.refusal
    if refusal.kind == "busy":
        return OpenAIError(429, refusal.message, None, "rate_limit_exceeded")
    field = {"max_new_tokens": "max_tokens", "num_return_sequences": "n"}.get(refusal.field, refusal.field)
    message = refusal.message.replace(f"{refusal.field}:", f"{field}:", 1)  # OpenAI's name for the field
    return OpenAIError(400, message, field, "context_length_exceeded" if refusal.kind == "too_long" else None)


class Sampling(BaseModel):
    """The sampling fields both text endpoints take (OpenAI's names and defaults)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)  # unset: the server's (generation.json), else OpenAI's 1
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    # OpenAI's penalties, and vLLM's top_k (0 or -1: all tokens), min_p and repetition_penalty; unset: the server's
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    n: int = Field(1, ge=1)
    logit_bias: LogitBias | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2 ** 53)  # exact in JSON, as the decoding config takes it
    return_token_ids: StrictBool = False  # vLLM's: each choice carries its prompt_token_ids and the token_ids it adds
    ignore_eos: StrictBool = False  # vLLM's: go on past the end-of-sequence token, to max_tokens (load tests)
    stream: StrictBool = False
    # include_usage: a last chunk with the usage; continuous_usage_stats (vLLM's): the usage so far in every chunk
    stream_options: dict[Literal["include_usage", "continuous_usage_stats"], StrictBool] | None = None
    user: str | None = None  # the caller's end-user id: accepted, not used
    response_format: ResponseFormat | None = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(max_length=64)
    schema_: dict | None = Field(None, alias="schema")
    strict: StrictBool | None = None
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
    echo: StrictBool = False  # the prompt comes back before the completion, with its tokens' log-probabilities


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


FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"  # a function's (a tool's) name, as OpenAI and Anthropic take it


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict | None = None  # a JSON schema of the arguments
    strict: StrictBool | None = None


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
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = Field(None, max_length=64)
    tool_choice: Literal["auto", "none", "required"] | ToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None  # accepted; a call constrained by the grammar is one call
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
        first = max(err.errors(), key=lambda e: len(_field(e)))  # of a union's branches, the one it went deepest in
        field = ".".join(_field(first)) or None
        if first.get("type") == "extra_forbidden":
            raise OpenAIError(400, f"{field}: not supported by this server", field, "unsupported_field") from None
        raise OpenAIError(400, f"{field}: {first.get('msg', 'invalid')}", field) from None


def _field(error: dict) -> list[str]:
    """An error's place as the body's keys and indices (pydantic's names of a union's branches left out)."""
    return [str(part) for part in error.get("loc", ())
            if not isinstance(part, str) or not re.search(r"[\[\-]|^(str|int|float|bool|dict|list)$", part)]
