"""The OpenAI-compatible entry point: GET /v1/models, POST /v1/completions, /v1/chat/completions, /v1/responses,
Anthropic's /v1/messages (decoder-only models) and /v1/embeddings (encoder-only models), as the official client
libraries call them.

It is kept apart from the engine: a request becomes one scheduler job per choice (``n``), whose
token events this module turns into OpenAI's JSON or its Server-Sent Events (``data: {chunk}`` ... ``data:
[DONE]``). Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: a field aiayn does
not implement is refused by name (400), never ignored.
"""

from __future__ import annotations

import base64

from fastapi import FastAPI, Request

from aiayn.inference.generator import TextGenerator
from aiayn.serve.declared import declare, declare_fields, declare_ids, undeclare, vocabulary
from aiayn.serve.limits import Limits
from aiayn.serve.messages import Conversation, MessagesRequest, add_messages_routes
from aiayn.serve.openai_chat import chat_answer
from aiayn.serve.openai_schema import ChatRequest, CompletionRequest, EmbeddingRequest, OpenAIError, check_model, parse
from aiayn.serve.openai_text import TextRoutes
from aiayn.serve.responses import ResponsesRequest, add_responses_route
from aiayn.serve.scheduler import Scheduler


def add_openai_routes(app: FastAPI, name: str, limits: Limits, generator: TextGenerator | None = None,
                      batcher: Scheduler | None = None, embed=None, mcp=None) -> None:
    """Mount /v1 on ``app`` for the model served as ``name``: the text routes with a ``generator`` and its
    ``batcher`` (and ``mcp``, the server's MCP tools: ``serve/mcp_loop.py``), /v1/embeddings with ``embed`` (an
    async function from texts to a (N, D) tensor)."""

    @app.exception_handler(OpenAIError)
    async def openai_error(_request: Request, err: OpenAIError):
        return err.response()

    declare(app, {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatRequest,
                  "/v1/responses": ResponsesRequest, "/v1/embeddings": EmbeddingRequest,
                  "/v1/messages": MessagesRequest, "/v1/messages/count_tokens": Conversation})

    names = [name, *(() if generator is None or generator.model.runtime.adapter_rows is None else
                     generator.model.runtime.adapter_rows.names)]
    text = {"model": {"enum": names}, "max_tokens": {"maximum": limits.max_new_tokens}}  # another model is a 404
    declare_fields(app, {"CompletionRequest": text, "EmbeddingRequest": {"model": {"enum": [name]}},
                         "ChatRequest": {**text, "max_completion_tokens": {"maximum": limits.max_new_tokens}},
                         "ResponsesRequest": {"model": {"enum": names},
                                              "max_output_tokens": {"maximum": limits.max_new_tokens}},
                         "MessagesRequest": {"model": {"enum": names}},  # max_tokens above the limit: clamped
                         "Conversation": {"model": {"enum": names}}})
    context = None if batcher is None else batcher.capacity

    @app.get("/v1/models")
    async def models() -> dict:
        """The model served and each LoRA adapter served beside it, with the context they take
        (``max_model_len``, vLLM's name)."""
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "aiayn",
                                            **({"max_model_len": context} if context else {}),
                                            **({"parent": name} if n != name else {})} for n in names]}

    if generator is not None:
        _add_text_routes(app, names, TextRoutes(name, generator, batcher, limits, mcp), generator)
        declare_ids(app, "CompletionRequest", "prompt", vocabulary(generator.tokenizer))
        if generator.chat_template is None:  # answered with a 400 that says so; not offered to a client
            undeclare(app, ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"))
    if embed is not None:
        _add_embeddings(app, name, limits, embed)


def _add_text_routes(app: FastAPI, names: list[str], texts: TextRoutes, generator: TextGenerator) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request):
        req = await parse(request, CompletionRequest)
        adapter = check_model(req.model, names)
        ids, shown = texts.completion_prompts(req.prompt)
        return await texts.complete(request, req, ids, shown, adapter)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await chat_answer(request, await parse(request, ChatRequest), names, texts)

    add_responses_route(app, names, texts)
    add_messages_routes(app, names, texts)


def _add_embeddings(app: FastAPI, name: str, limits: Limits, embed) -> None:
    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict:
        req = await parse(request, EmbeddingRequest)
        check_model(req.model, name)
        inputs = [req.input] if isinstance(req.input, str) else req.input
        if not inputs:
            raise OpenAIError(400, "input: empty; give a text or a list of texts", "input")
        if (over := limits.oversize(inputs, "input")) is not None:
            raise OpenAIError(413, over, "input")
        vectors, tokens = await embed(inputs)
        data = [{"object": "embedding", "index": i,
                 "embedding": vector.tolist() if req.encoding_format == "float" else
                 base64.b64encode(vector.float().numpy().astype("<f4").tobytes()).decode()}
                for i, vector in enumerate(vectors)]
        return {"object": "list", "data": data, "model": name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
