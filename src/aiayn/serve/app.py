"""The FastAPI app: POST /translate, POST /attention, POST /attention/head, GET /health, GET / (the web page),
docs at /docs."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import torch
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from aiayn.decoding.config import DecodingConfig, own_strategy
from aiayn.inference.translator import Translator
from aiayn.serve.declared import NONBLANK, ExactlyOne, Whole, declare_fields
from aiayn.serve.family import create_family_app, one_output, vocabulary
from aiayn.serve.http import (
    STATIC,
    DecodingOptions,
    base_app,
    check_size,
    health_body,
    native_refusal,
    request_decoding,
    serve_until_stopped,
    server_config,
)
from aiayn.serve.jobs import DecodeJob, Refusal, Refused
from aiayn.serve.limits import Limits
from aiayn.serve.metrics import add_metrics
from aiayn.serve.openai import add_openai_routes
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.tokens import add_token_routes
from aiayn.visual.attention import attention_for
from aiayn.visual.inside import NoSuchPosition, inside_for
from aiayn.visual.refinement import alignment_for, refinement_for


class TranslateRequest(DecodingOptions, ExactlyOne):
    """One ``text`` or a list of ``texts``, and optional decoding options (server defaults otherwise)."""

    model_config = ConfigDict(extra="forbid")
    one_of = ("text", "texts")
    text: str = Field(None)  # exactly one of text and texts; neither may be null
    texts: list[str] = Field(None, min_length=1)


class AttentionRequest(BaseModel):
    """A source sentence and, optionally, the target to force (default: the model's translation)."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(pattern=NONBLANK)
    target: str | None = None


class RefinementRequest(BaseModel):
    """A source sentence for Mask-Predict, and optionally T and l (default: the server's decoding)."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(pattern=NONBLANK)
    iterations: int | None = Field(None, ge=1, le=100)
    length_beam: int | None = Field(None, ge=1, le=100)


class HeadRequest(AttentionRequest):
    """Inside one head: which attention, layer, head and query row (0-based) to open."""

    kind: Literal["encoder", "decoder_self", "cross"] = "cross"
    layer: Whole = Field(0, ge=0)
    head: Whole = Field(0, ge=0)
    query: Whole = Field(0, ge=0, description="the row: a source token (encoder) or a decoder input token (past the "
                                              "text: 404)")


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
        if event is not None and event["finish_reason"] == "error":
            raise HTTPException(500, event["detail"])
    return ["" if event is None else translator.tokenizers.tgt.decode(event["ids"]) for event in ended]


def final_event(loop: asyncio.AbstractEventLoop, future: asyncio.Future):
    """An ``emit`` for a job whose tokens are not streamed: ``future`` gets its final event."""

    def emit(event: dict) -> None:
        if "finish_reason" in event:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(event))

    return emit


def create_app(translator, limits: Limits = Limits(), max_batch: int = 64, wait_ms: float = 5.0,
               info: dict | None = None, threads: int | None = None, embedder=None, name: str = "aiayn",
               api_key: str | None = None, batching: str = "continuous") -> FastAPI:
    """The app around an engine: a ``Translator`` (/translate, /attention), a ``TextGenerator`` (/generate)
    or a ``MaskFiller`` (/fill-mask; with an ``Embedder``, /embed too). Its scheduler (``serve/scheduler.py``:
    continuous batching, or ``batching="static"``) starts and stops with the app; all its computing runs on
    one thread with ``threads`` compute threads (``serve/threads.py``)."""
    from aiayn.inference.fill_mask import MaskFiller
    from aiayn.inference.generator import TextGenerator

    if isinstance(translator, (TextGenerator, MaskFiller)):
        return create_family_app(translator, limits, max_batch, threads, embedder, name, api_key, batching, wait_ms)

    capacity = max(translator.model.config.max_len, limits.max_new_tokens) + 1  # BOS + the longest output
    batcher = Scheduler(translator.model, max_batch, capacity, static=batching == "static", threads=threads,
                        limits=limits)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        yield
        batcher.stop()

    app = base_app(lifespan, limits, api_key)
    app.state.batcher = batcher
    add_metrics(app, batcher)
    add_openai_routes(app, name, limits)  # GET /v1/models; a translator has no OpenAI text route
    _add_routes(app, translator, batcher, limits, info or {})
    add_token_routes(app, translator.tokenizers.src, translator.model.config.max_len, limits)
    cfg = translator.model.config
    declare_fields(app, {"HeadRequest": {"layer": {"maximum": max(cfg.n_encoder_layers, cfg.n_decoder_layers) - 1},
                                         "head": {"maximum": cfg.n_heads - 1}},
                         "DetokenizeRequest": {"tokens": {"items": vocabulary(translator.tokenizers.src)}},
                         "TranslateRequest": {**one_output(limits, (own_strategy(cfg),) if cfg.non_autoregressive
                                                           else ("greedy", "beam", "sample")),
                                              "json_schema": {"type": "null"}, "grammar": {"type": "null"}}})
    if getattr(translator.model, "tensor_parallel", 1) == 1:  # split, a rank sees its own heads only: no pictures
        _add_inspection_routes(app, translator, batcher, limits)
    return app


def _add_routes(app: FastAPI, translator: Translator, batcher: Scheduler, limits: Limits,
                info: dict) -> None:
    """GET / (the web page), GET /health and POST /translate."""
    cfg = translator.model.config

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/health")
    async def health() -> dict:
        """Liveness, the model's dimensions, the limits and the scheduler's counts."""
        return health_body(cfg, limits, **batcher.stats(), beam_size=translator.decoding.beam_size,
                           decoding=translator.decoding.to_dict(), **info)

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


def _add_inspection_routes(app: FastAPI, translator: Translator, batcher: Scheduler, limits: Limits) -> None:
    """/attention, /attention/head and /refinement: the pictures of the web page, each run alone between two
    decoding steps."""
    cfg = translator.model.config

    @app.post("/attention", include_in_schema=not cfg.non_autoregressive)  # CMLM, CTC: none (422, not in schema)
    async def attention(req: AttentionRequest) -> dict:
        """Tokens and weights [layer][head][row][col] for encoder, decoder_self and cross attention."""
        _check_attention(req, translator, limits)
        maps = await asyncio.wrap_future(batcher.run_alone(attention_for, translator, req.source, req.target))
        return {**maps.to_dict(), "heads": cfg.n_heads}

    @app.post("/refinement", include_in_schema=cfg.non_autoregressive)
    async def refinement(req: RefinementRequest) -> dict:
        """A CMLM's Mask-Predict on ``source``: {"source_tokens", "steps": [{"tokens", "probabilities",
        "predicted"}] per iteration, "translation"}; a CTC model's one pass: one step (what each upsampled position
        emits, "predicted": kept by the collapse) and "inputs" (the upsampled source pieces)."""
        if not cfg.non_autoregressive:
            raise HTTPException(422, "refinement: this checkpoint is autoregressive; Mask-Predict needs a CMLM, "
                                     "a best path a CTC model")
        _check_attention(AttentionRequest(source=req.source), translator, limits, maps=False)
        if cfg.ctc_upsample:
            found = await asyncio.wrap_future(batcher.run_alone(alignment_for, translator, req.source))
        else:
            found = await asyncio.wrap_future(batcher.run_alone(refinement_for, translator, req.source,
                                                                req.iterations, req.length_beam))
        return found.to_dict()

    @app.post("/attention/head", include_in_schema=not cfg.non_autoregressive)
    async def attention_head(req: HeadRequest) -> dict:
        """Inside one head: for row ``query`` of ``kind`` in ``layer``/``head`` (0-based), the query vector,
        keys, values, scores q.k/sqrt(d_k), mask, softmax weights (the /attention numbers) and output."""
        _check_attention(req, translator, limits)
        try:
            found = await asyncio.wrap_future(batcher.run_alone(inside_for, translator, req.source, req.target,
                                                                req.kind, req.layer, req.head, req.query))
        except NoSuchPosition as err:
            raise HTTPException(404, str(err)) from None
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return found.to_dict()


def _check_attention(req: AttentionRequest, translator: Translator, limits: Limits, maps: bool = True) -> None:
    """413/422 for a pair /attention cannot take; ``maps``: attention pictures (a CMLM has none: 422)."""
    if maps and translator.model.config.non_autoregressive:
        raise HTTPException(422, "attention: drawn for autoregressive models; a CMLM's or CTC model's one is "
                                 "POST /refinement")
    check_size([req.source] + ([req.target] if req.target else []), limits)
    if not req.source.strip():
        raise HTTPException(422, "source: give a sentence to attend over")
    n_tokens = len(translator.source_ids(req.source))
    if n_tokens > limits.max_attention_tokens:
        raise HTTPException(413, f"source has {n_tokens} tokens; /attention takes up to {limits.max_attention_tokens}")


def _attach_loras(model, loras: dict[str, str]) -> None:
    from aiayn.interop.peft import read_adapter
    from aiayn.model.multi_lora import attach_adapters

    if model.config.arch != "decoder-only":
        raise ValueError(f"--lora: several adapters in one batch are served for language models, not "
                         f"{model.config.arch}; merge one with aiayn merge, or pass --adapter")
    attach_adapters(model, {name: read_adapter(model, folder) for name, folder in loras.items()})


def run_server(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, limits: Limits = Limits(),
               decoding: dict | None = None, int8: bool = False, device: str = "cpu", max_batch: int = 64,
               wait_ms: float = 5.0, bf16: bool = False, prepare=None, name: str | None = None,
               api_key: str | None = None, batching: str = "continuous", int4: bool = False,
               loras: dict[str, str] | None = None, parallel=None) -> None:
    """Load the checkpoint and serve it with uvicorn until interrupted; decoding defaults: the checkpoint's
    ``generation.json`` with ``decoding`` (field -> value, ``aiayn serve``'s flags) replaced; ``prepare`` as
    in ``load_checkpoint`` (``--adapter``); ``name``: the model's name on /v1 (default: the checkpoint
    folder's); ``api_key``: every route but /health needs it; ``loras``: adapter folders served beside the base
    (name -> folder; a language model's, unmerged, each row its own: ``model/multi_lora.py``); ``parallel``: this
    process's place under ``--tensor-parallel`` (rank 0 serves, the others follow: ``serve/mirror.py``)."""
    from aiayn.inference.embed import Embedder, Pooling
    from aiayn.inference.fill_mask import MaskFiller
    from aiayn.inference.generator import TextGenerator
    from aiayn.inference.load import load_checkpoint
    from aiayn.io.run import resolve_checkpoint
    from aiayn.serve.threads import single_threaded_main

    threads = single_threaded_main()  # the decoding thread alone computes in parallel (serve/threads.py)
    folder = resolve_checkpoint(checkpoint)
    model, tokenizers = load_checkpoint(folder, prepare=prepare)  # read once; the engine follows the member
    if loras:
        _attach_loras(model, loras)
    defaults = DecodingConfig.load(folder).replace(**(decoding or {}))
    embedder = None
    if model.config.arch == "decoder-only":
        engine = TextGenerator(model, tokenizers, device, bf16=bf16, decoding=defaults, int8=int8, int4=int4)
    elif model.config.arch == "encoder-only":
        engine = MaskFiller(model, tokenizers, device)
        embedder = Embedder(model, tokenizers, Pooling.load(folder), device)
    else:
        engine = Translator(model, tokenizers, device, defaults, int8=int8, bf16=bf16, int4=int4)
    app = create_app(engine, limits, max_batch, wait_ms, threads=threads, embedder=embedder,
                     name=name or Path(checkpoint).resolve().name, api_key=api_key, batching=batching)
    _serve(app, server_config(app, host, port, limits), parallel, threads)


def _serve(app: FastAPI, config, parallel, threads: int | None) -> None:
    """uvicorn until stopped; under ``--tensor-parallel`` rank 0 serves and leads, the other ranks follow it."""
    if parallel is None:
        serve_until_stopped(config)
        return
    from aiayn.serve.mirror import follow, lead

    if not parallel.leader:
        torch.set_num_threads(threads or torch.get_num_threads())
        follow(app.state.batcher, parallel)
        return
    leader = lead(app.state.batcher, parallel)
    try:
        serve_until_stopped(config)
    finally:
        leader.stop()
