"""An encoder-decoder's routes: POST /translate (each text one decode job through the scheduler), the web page,
/health, /tokenize and /detokenize of the source tokenizer. Its pictures are ``serve/inspect.py``'s."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, HTTPException
from pydantic import ConfigDict, Field

from aiayn.decoding.config import DecodingConfig, own_strategy
from aiayn.decoding.source_cache import SOURCE_CACHE_BYTES, SourceCache
from aiayn.inference.translator import Translator
from aiayn.serve.declared import ExactlyOne, declare_fields, one_output, vocabulary
from aiayn.serve.http import (
    DecodingOptions,
    Served,
    add_page_and_health,
    check_size,
    native_refusal,
    request_decoding,
)
from aiayn.serve.jobs import DecodeJob, Event, Finished, Refusal, Refused
from aiayn.serve.limits import Limits
from aiayn.serve.openai import add_openai_routes
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.tokens import add_token_routes


class TranslateRequest(DecodingOptions, ExactlyOne):
    """One ``text`` or a list of ``texts``, and optional decoding options (server defaults otherwise)."""

    model_config = ConfigDict(extra="forbid")
    one_of = ("text", "texts")
    text: str = Field(None)  # exactly one of text and texts; neither may be null
    texts: list[str] = Field(None, min_length=1)


def product(model, tokenizers, folder, decoding: DecodingConfig, device: str, **precision) -> tuple[Translator, None]:
    """The translator that serves a loaded encoder-decoder, its weights handed over (held once)."""
    return Translator(model, tokenizers, device, decoding, own=True, **precision), None


def scheduler(translator: Translator, limits: Limits, **options) -> Scheduler:
    """The scheduler of a translator: room in each row for BOS and the longest output; a prompt cache of the
    sources seen before (``limits.prefix_cache_bytes``; -1: ``SOURCE_CACHE_BYTES``)."""
    capacity = max(translator.model.config.max_len, limits.max_new_tokens) + 1
    cap = limits.prefix_cache_bytes if limits.prefix_cache_bytes >= 0 else SOURCE_CACHE_BYTES
    return Scheduler(translator.model, capacity=capacity, limits=limits,
                     prefix_cache=SourceCache(translator.model, max_bytes=cap), draft=translator.draft,
                     draft_tokens=translator.draft_tokens, **options)


def add_routes(app: FastAPI, served: Served) -> None:
    """GET / (the page with the attention pictures), GET /health, POST /translate, /tokenize, /detokenize and
    GET /v1/models (a translator has no OpenAI text route)."""
    translator, limits = served.product, served.limits
    cfg = translator.model.config
    add_page_and_health(app, served, "index.html", beam_size=translator.decoding.beam_size,
                        decoding=translator.decoding.to_dict(), **served.info)
    add_openai_routes(app, served.name, limits)
    _add_translate(app, translator, served.scheduler, limits)
    add_token_routes(app, translator.tokenizers.src, cfg.max_len)
    strategies = (own_strategy(cfg),) if cfg.non_autoregressive else ("greedy", "beam", "sample")
    declare_fields(app, {"HeadRequest": {"layer": {"maximum": max(cfg.n_encoder_layers, cfg.n_decoder_layers) - 1},
                                         "head": {"maximum": cfg.n_heads - 1}},
                         "DetokenizeRequest": {"tokens": {"items": vocabulary(translator.tokenizers.src)}},
                         "TranslateRequest": {**one_output(limits, strategies), "json_schema": {"type": "null"},
                                              "grammar": {"type": "null"}}})


def _add_translate(app: FastAPI, translator: Translator, batcher: Scheduler, limits: Limits) -> None:
    @app.post("/translate")
    async def translate(req: TranslateRequest) -> dict:
        """Translate ``text`` -> {"translation"} or ``texts`` -> {"translations"}."""
        texts = [req.text] if req.text is not None else req.texts
        if not texts:
            raise HTTPException(422, "texts: give at least one text")
        check_size(texts, limits)
        decoding = request_decoding(req, translator.decoding)
        if decoding.json_schema is not None or decoding.grammar is not None:
            field = "json_schema" if decoding.json_schema is not None else "grammar"
            raise HTTPException(422, f"{field}: structured output is for language models; a translation takes none")
        checked = batcher.decoding_for(decoding)  # every request's, an all-empty one's too (no job to check it)
        if isinstance(checked, Refusal):
            raise native_refusal(Refused(checked))
        results = await _translate(batcher, translator, texts, decoding)
        return {"translation": results[0]} if req.text is not None else {"translations": results}


async def _translate(batcher: Scheduler, translator: Translator, texts: list[str],
                     decoding: DecodingConfig) -> list[str]:
    """Each non-empty text is one decode job (its rows join the running batch); "" stays "". The scheduler's
    admission check resolves the decoding (mask-predict for a CMLM runs alone between two steps) or refuses
    the request (422/429)."""
    loop = asyncio.get_running_loop()
    jobs, finals = [], []  # finals: per text, its job's final event to come (None for an empty text)
    for text in texts:
        ids = translator.source_ids(text, decoding)
        finals.append(loop.create_future() if ids else None)
        if ids:
            jobs.append(DecodeJob(ids, decoding, final_event(loop, finals[-1])))
    try:
        batcher.submit(*jobs)
    except Refused as err:
        raise native_refusal(err) from None
    try:
        ended = [None if final is None else await final for final in finals]
    finally:
        for job in jobs:
            job.cancelled = True  # a client that went away frees its rows at the next step
    for event in ended:
        if event is not None and event.finish_reason == "error":
            raise HTTPException(500, event.detail)
    return ["" if event is None else translator.tokenizers.tgt.decode(event.ids) for event in ended]


def final_event(loop: asyncio.AbstractEventLoop, future: asyncio.Future):
    """An ``emit`` for a job whose tokens are not streamed: ``future`` gets its final event."""

    def emit(event: Event) -> None:
        if isinstance(event, Finished):
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(event))

    return emit
