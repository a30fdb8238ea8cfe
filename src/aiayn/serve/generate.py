"""A language model's routes: POST /generate (a prompt continued, the answer whole or streamed as Server-Sent
Events, one decode job through the scheduler; its decoding: the server's defaults with the request's fields; a
``json_schema`` or ``grammar`` constrains it; ``adapter`` picks a LoRA adapter served beside the model), the
OpenAI-compatible /v1 routes (``serve/openai.py``), /tokenize and /detokenize, the page and /health. Its
pictures are ``serve/inspect.py``'s."""

from __future__ import annotations

import asyncio
import json

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import ConfigDict, Field, StrictBool

from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.prefix import PromptCache, sized_for
from aiayn.inference.generator import TextGenerator, TextStream
from aiayn.serve.declared import declare_fields, one_output, vocabulary
from aiayn.serve.http import (
    STATIC,
    DecodingOptions,
    Served,
    add_page_and_health,
    native_refusal,
    request_decoding,
)
from aiayn.serve.jobs import DecodeJob, Finished, Refused
from aiayn.serve.limits import Limits
from aiayn.serve.openai import add_openai_routes
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.tokens import add_token_routes


class GenerateRequest(DecodingOptions):
    """A prompt and decoding options (one continuation: greedy, sampled, the best beam, or following a
    ``json_schema`` or ``grammar``); ``stream`` answers with Server-Sent Events, one per token."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1)
    stream: StrictBool = False
    adapter: str | None = Field(None, description="a LoRA adapter served beside the model (aiayn serve --lora "
                                                  "NAME=...): its NAME; unset, the base model")


PAGE_DECODING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens", "seed")  # /health's


def product(model, tokenizers, folder, decoding: DecodingConfig, device: str,
            **precision) -> tuple[TextGenerator, None]:
    """The generator that serves a loaded language model, its weights handed over (held once)."""
    return TextGenerator(model, tokenizers, device, decoding=decoding, own=True, **precision), None


def scheduler(generator: TextGenerator, limits: Limits, **options) -> Scheduler:
    """The scheduler of a language model: a KV cache of the context it takes (learned positions: its own
    length; else its length or ``limits.max_context`` if larger; ``limits.max_model_len`` caps either), a prompt
    cache of ``limits.prefix_cache_bytes`` (-1: sized for the model, ``decoding/prefix.sized_for``)."""
    cfg = generator.model.config
    capacity = cfg.max_len if cfg.positions == "learned" else max(cfg.max_len, limits.max_context)
    capacity = min(capacity, limits.max_model_len or capacity)
    cap = limits.prefix_cache_bytes if limits.prefix_cache_bytes >= 0 else sized_for(generator.model, capacity)
    prefix = PromptCache(generator.model, max_bytes=cap)
    return Scheduler(generator.model, capacity=capacity, prefix_cache=prefix, limits=limits, draft=generator.draft,
                     draft_tokens=generator.draft_tokens, **options)


def add_routes(app: FastAPI, served: Served) -> None:
    """GET / (the family's page), GET /health, /tokenize, /detokenize, POST /generate and the /v1 routes."""
    generator, batcher, limits = served.product, served.scheduler, served.limits
    page = "family.html" if generator.chat_template is None else "chat.html"  # a chat model's page is the chat
    mcp = [] if served.mcp is None else [spec["function"]["name"] for spec in served.mcp.specs]
    add_page_and_health(app, served, page, max_model_len=batcher.capacity, chat=generator.chat_template is not None,
                        decoding={k: getattr(generator.decoding, k) for k in PAGE_DECODING}, mcp_tools=mcp)

    @app.get("/complete", include_in_schema=False)
    async def complete_page() -> FileResponse:
        """The prompt box (a text continued, then its attention): a chat model's page links here."""
        return FileResponse(STATIC / "family.html")

    chat = None if generator.chat_template is None else \
        (lambda messages, prompt: generator.rendered_ids(generator.chat_template(messages, prompt)))
    add_token_routes(app, generator.tokenizer, batcher.capacity, chat)
    _declare_bounds(app, generator, limits)
    _add_generate(app, generator, batcher, limits)
    add_openai_routes(app, served.name, limits, generator, batcher, mcp=served.mcp)


def _declare_bounds(app: FastAPI, generator: TextGenerator, limits: Limits) -> None:
    """What /openapi.json can bound for this model: its layers and heads, its vocabulary, its adapters, the
    server's length limit."""
    cfg, rows = generator.model.config, generator.model.runtime.adapter_rows
    adapters = [{"enum": rows.names}] if rows is not None else []
    ids = {"items": vocabulary(generator.tokenizer)}
    declare_fields(app, {"TextHeadRequest": {"layer": {"maximum": cfg.n_decoder_layers - 1},
                                             "head": {"maximum": cfg.n_heads - 1}, "ids": ids},
                         "DetokenizeRequest": {"tokens": ids}, "TextAttentionRequest": {"ids": ids},
                         "GenerateRequest": {"adapter": {"anyOf": [*adapters, {"type": "null"}]},
                                             **one_output(limits, ("greedy", "beam", "sample"))}})


def _add_generate(app: FastAPI, generator: TextGenerator, batcher: Scheduler, limits: Limits) -> None:
    """POST /generate, whole or streamed as server-sent events."""

    @app.post("/generate")
    async def generate(req: GenerateRequest, request: Request):
        """Continue ``prompt``: {"text", "finish_reason", "prompt_tokens", "completion_tokens"}, or with
        ``stream`` one SSE event per token ({"text", "id"}) and a last one with the finish reason and counts."""
        decoding = request_decoding(req, generator.decoding)
        prompt = _checked_prompt(req.prompt, limits, generator)
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        emit = lambda e: loop.call_soon_threadsafe(events.put_nowait, e)  # noqa: E731
        job = DecodeJob(prompt, decoding, emit, grammar=_grammar(generator, decoding),
                        adapter=_adapter(generator, req.adapter))
        try:
            batcher.submit(job)
        except Refused as err:
            raise native_refusal(err) from None
        if req.stream:
            return StreamingResponse(_sse(job, events, generator, request), media_type="text/event-stream")
        try:
            final, _ = await _collect(events)
        finally:
            job.cancelled = True  # a client that went away frees its row at the next step
        if final.finish_reason == "error":
            raise HTTPException(500, final.detail)
        return {"text": generator.tokenizer.decode(final.ids), **final.counts()}


def _grammar(generator: TextGenerator, decoding: DecodingConfig):
    """The compiled grammar a request's ``json_schema`` or ``grammar`` asks for (422 naming what is wrong)."""
    try:
        return generator.grammars.for_decoding(decoding)
    except ValueError as err:
        raise HTTPException(422, str(err)) from None


def _adapter(generator: TextGenerator, name: str | None) -> int:
    """The index of the adapter a request names (0: none, the base model); one not served is 422."""
    if name is None:
        return 0
    if generator.model.runtime.adapter_rows is None:
        raise HTTPException(422, "adapter: this server serves no adapters (aiayn serve --lora NAME=FOLDER)")
    try:
        return generator.model.runtime.adapter_rows.number(name)
    except ValueError as err:
        raise HTTPException(422, str(err)) from None


def _checked_prompt(text: str, limits: Limits, generator: TextGenerator) -> list[int]:
    """The prompt's ids, or 422 for an empty text (lengths, in tokens: the scheduler's check)."""
    if not text:
        raise HTTPException(422, "prompt: empty; give the text to continue")
    return generator.prompt_ids(text)


async def _collect(events: asyncio.Queue) -> tuple[Finished, list[int]]:
    ids = []
    while not isinstance(event := await events.get(), Finished):
        ids.append(event.id)
    return event, ids


async def _sse(job: DecodeJob, events: asyncio.Queue, generator: TextGenerator, request: Request):
    """Server-Sent Events: ``data: {"text", "id"}`` per token, then ``data: {"finish_reason", ...}``."""
    text = TextStream(generator.tokenizer)
    try:
        while True:
            event = await events.get()
            if isinstance(event, Finished):
                text_of = generator.tokenizer.decode(event.ids)
                detail = {} if event.detail is None else {"detail": event.detail}
                yield f"data: {json.dumps({**event.counts(), 'text': text_of, **detail})}\n\n"
                return
            yield f"data: {json.dumps({'text': text.add(event.id), 'id': event.id}, ensure_ascii=False)}\n\n"
            if await request.is_disconnected():
                return
    finally:
        job.cancelled = True

