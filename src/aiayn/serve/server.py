"""The server's front door: a checkpoint loaded once into one product (the inference copy that computes: a
``Translator``, ``TextGenerator`` or ``MaskFiller``), one scheduler it computes on, and one FastAPI app whose
routes the model's kind chooses in one table (``ROOMS``). Under ``--tensor-parallel`` rank 0 serves and leads;
every other rank follows it with a scheduler and no app (``serve/mirror.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from fastapi import FastAPI

from aiayn.serve import encode, generate, inspect, translate
from aiayn.serve.http import Served, base_app, serve_until_stopped, server_config
from aiayn.serve.limits import Limits
from aiayn.serve.metrics import add_metrics
from aiayn.serve.scheduler import Scheduler


@dataclass(frozen=True)
class Room:
    """What a model kind is served with: the product made of its loaded model, its scheduler's maker, its routes,
    its pictures (None: none)."""

    product: Callable[..., tuple]
    scheduler: Callable[..., Scheduler]
    routes: Callable[[FastAPI, Served], None]
    pictures: Callable[[FastAPI, Served], None] | None


ROOMS = {"encoder-decoder": Room(translate.product, translate.scheduler, translate.add_routes,
                                 inspect.add_translation_pictures),
         "decoder-only": Room(generate.product, generate.scheduler, generate.add_routes, inspect.add_lm_pictures),
         "encoder-only": Room(encode.product, encode.scheduler, encode.add_routes, None)}


BODY_BYTES_PER_TOKEN = 32  # a token of JSON text: at most a few characters, each at most 6 bytes escaped


def build_scheduler(product, limits: Limits = Limits(), max_batch: int = 64, wait_ms: float = 5.0,
                    threads: int | None = None, embedder=None, batching: str = "continuous") -> Scheduler:
    """The one scheduler of ``product`` (continuous batching, or ``batching="static"``; ``max_batch`` rows;
    ``wait_ms``: how long an encoder's queue waits for requests to batch with; ``threads``: its compute
    threads, ``serve/threads.py``)."""
    options = {"max_batch": max_batch, "wait_ms": wait_ms, "threads": threads, "static": batching == "static"}
    if embedder is not None:
        options["embedder"] = embedder
    return ROOMS[product.model.config.arch].scheduler(product, limits, **options)


def build_app(served: Served, api_key: str | None = None, ready: Future | None = None) -> FastAPI:
    """The app around ``served``: its scheduler starts and stops with it (one lifespan); /metrics, the model
    kind's routes and, unless the model is split over processes (a rank sees its own heads), its pictures.
    With ``api_key`` every route but /health needs ``Authorization: Bearer KEY``. ``ready``: the scheduler's first
    chore (``compile_first``), awaited before the app starts: uvicorn opens the port after it, as vLLM's server
    does, so /health answering means a request decodes at the compiled step's speed, not queued behind a compile."""
    scheduler = served.scheduler
    if served.product.model.config.arch == "decoder-only":  # a body holds a prompt as long as the context
        limits = served.limits
        served = dataclasses.replace(served, limits=dataclasses.replace(
            limits, max_body_bytes=max(limits.max_body_bytes, BODY_BYTES_PER_TOKEN * scheduler.capacity)))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        scheduler.start()
        if ready is not None:
            await asyncio.wrap_future(ready)
        yield
        scheduler.stop()

    app = base_app(lifespan, served.limits, api_key)
    app.state.batcher = scheduler
    add_metrics(app, scheduler)
    room = ROOMS[served.product.model.config.arch]
    room.routes(app, served)
    if room.pictures is not None and served.product.model.runtime.world == 1:
        room.pictures(app, served)
    return app


def create_app(product, limits: Limits = Limits(), max_batch: int = 64, wait_ms: float = 5.0,
               info: dict | None = None, threads: int | None = None, embedder=None, name: str = "aiayn",
               api_key: str | None = None, batching: str = "continuous", mcp=None) -> FastAPI:
    """The app around a product: a ``Translator`` (/translate, /attention), a ``TextGenerator`` (/generate, /v1)
    or a ``MaskFiller`` (/fill-mask; with an ``Embedder``, /embed too), served as model ``name``; ``info``: more
    for a translator's /health; ``mcp``: a language model's MCP tools (``serve/mcp_tools.McpTools``). Its
    scheduler: :func:`build_scheduler`."""
    scheduler = build_scheduler(product, limits, max_batch, wait_ms, threads, embedder, batching)
    return build_app(Served(product, scheduler, limits, name, embedder, info or {}, mcp), api_key)


def load_product(checkpoint: str, decoding: dict | None = None, device: str = "cpu", int8: bool = False,
                 bf16: bool = False, int4: bool = False, prepare=None, loras: dict[str, str] | None = None,
                 draft: str | None = None, draft_tokens: int | None = None, kv_cache_dtype: str | None = None):
    """The checkpoint read once and made the product that serves it (its room's ``product``), the loaded weights
    handed over (held once); an encoder's ``Embedder`` shares its ``MaskFiller``'s copy; ``draft``: what drafts
    for its speculative decoding (``inference/draft.py``), ``draft_tokens`` a pass; ``kv_cache_dtype``: ``int8``,
    the int8 KV cache (``model/kv_int8.py``). Returns (product, embedder or None)."""
    from aiayn.inference.load import checkpoint_arch, load_for_use
    from aiayn.inference.precision import converter
    from aiayn.io.run import resolve_checkpoint
    from aiayn.model.kv_int8 import cache_dtype

    folder = resolve_checkpoint(checkpoint)
    lm = checkpoint_arch(folder) == "decoder-only"  # its layers converted as read
    convert = converter(device, int8=int8, bf16=bf16, int4=int4, few_rows=True) if lm and not loras else None
    model, tokenizers, defaults = load_for_use(folder, prepare=prepare, convert=convert)
    if loras:
        _attach_loras(model, loras)
    defaults = defaults.replace(**(decoding or {}))
    arch = model.config.arch
    if draft is not None and arch == "encoder-only":
        raise ValueError("--draft: speculative decoding is for models that generate, not an encoder-only one")
    product, embedder = ROOMS[arch].product(model, tokenizers, folder, defaults, device, int8=int8, bf16=bf16,
                                            int4=int4)
    if arch != "encoder-only":  # the KV cache's dtype; --draft, or the draft the checkpoint's generation.json names
        product.model.runtime.kv_cache_dtype = cache_dtype(kv_cache_dtype)
        from aiayn.inference.draft import load_draft
        from aiayn.inference.precision import Precision

        precision = Precision(device, int8=int8, int4=int4, bf16=bf16, few_rows=True)
        product.draft = load_draft(draft, folder, tokenizers, arch, precision, prepare)
        product.draft_tokens = draft_tokens
    return product, embedder


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
               loras: dict[str, str] | None = None, parallel=None, compile: str = "off", draft: str | None = None,
               draft_tokens: int | None = None, mcp=None, kv_cache_dtype: str | None = None) -> None:
    """Load the checkpoint and serve it with uvicorn until interrupted; decoding defaults: the checkpoint's
    ``generation.json`` with ``decoding`` (field -> value, ``aiayn serve``'s flags) replaced; ``prepare`` as
    in ``load_checkpoint`` (``--adapter``); ``name``: the model's name on /v1 (default: the checkpoint
    folder's); ``api_key``: every route but /health needs it; ``loras``: adapter folders served beside the base
    (name -> folder; a language model's, unmerged, each row its own: ``model/multi_lora.py``); ``parallel``: this
    process's place under ``--tensor-parallel`` (rank 0 serves, the others follow: ``serve/mirror.py``); ``compile``:
    a language model's decoding step compiled as ``--compile`` says (``inference/compiled.py``), and a draft model's;
    ``draft``, ``draft_tokens``: speculative decoding (``--draft``); ``mcp``: MCP tools offered to a chat model
    (``serve/mcp_tools.McpTools``, ``--mcp``); ``kv_cache_dtype``: ``int8``, the int8 KV cache."""
    from aiayn.decoding.drafts import ModelDraft
    from aiayn.inference.draft import draft_source
    from aiayn.serve.threads import single_threaded_main

    threads = single_threaded_main()  # the decoding thread alone computes in parallel (serve/threads.py)
    product, embedder = load_product(checkpoint, decoding, device, int8, bf16, int4, prepare, loras, draft,
                                     draft_tokens, kv_cache_dtype)
    if mcp is not None and not getattr(product, "takes_tools", False):
        raise ValueError("--mcp: this model's chat template takes no tools (Qwen2.5's and Hermes-style templates do)")
    scheduler = build_scheduler(product, limits, max_batch, wait_ms, threads, embedder, batching)
    drafted = getattr(product, "draft", None) is not None  # the model verifies several tokens of a row a pass
    compiling = compile_first(product.model, {"batches": True, "columns": drafted}, scheduler, compile, device,
                              behind=None if loras else (checkpoint, {"int8": int8, "int4": int4, "bf16": bf16}))
    if isinstance(getattr(product, "draft", None), ModelDraft):  # it steps one token at a time for one row
        compile_first(product.draft.model, {}, scheduler, compile, device, draft=True,
                      behind=None if loras else draft_source(checkpoint, draft, {"int8": int8, "int4": int4,
                                                                                  "bf16": bf16}))
    if parallel is not None and not parallel.leader:
        from aiayn.serve.mirror import follow

        torch.set_num_threads(threads or torch.get_num_threads())
        follow(scheduler, parallel)
        return
    served = Served(product, scheduler, limits, name or Path(checkpoint).resolve().name.removesuffix(".gguf"), embedder,
                    mcp=mcp)
    app = build_app(served, api_key, ready=compiling)
    print(startup_line(served), file=sys.stderr, flush=True)
    gc.collect()
    gc.freeze()  # what is loaded stays out of every later full collection (vLLM does the same): on SmolLM2 each
    # scanned it for 160-170 ms, a pause of every stream
    try:
        _serve(server_config(app, host, port, limits), scheduler, parallel)
    finally:
        for behind in (getattr(scheduler, "behind", None), getattr(scheduler, "draft_behind", None)):
            if behind is not None:
                behind.stop()  # a compile not done by then is not left running


def model_loader(limits: Limits, api_key: str | None, options: dict, decoding: dict | None = None, device: str = "cpu",
                 max_batch: int = 64, wait_ms: float = 5.0, batching: str = "continuous", compile: str = "off"):
    """``load(name, path)`` for ``serve/models.py``'s pool (``--models DIR``): the model read and served as
    :func:`run_server` serves one (``options``: ``int8``, ``int4``, ``bf16``, ``kv_cache_dtype``), its scheduler
    started; its compiled step loaded, or compiled by a child, behind its first requests (``--compile``)."""
    def load(name: str, path: Path):
        product, embedder = load_product(str(path), decoding, device, **options)
        scheduler = build_scheduler(product, limits, max_batch, wait_ms, None, embedder, batching)
        served = Served(product, scheduler, limits, name, embedder)
        app = build_app(served, api_key)
        scheduler.start()
        flags = {k: v for k, v in options.items() if k in ("int8", "int4", "bf16")}
        compile_first(product.model, {"batches": True}, scheduler, compile, device, behind=(str(path), flags))
        return served, app
    return load


def run_models(folder: str, host: str, port: int, limits: Limits, api_key: str | None, pool_options: dict,
               **load_options) -> None:
    """``aiayn serve --models DIR``: ``pool_options`` as ``models.ModelPool`` takes them (memory, most, ttl, pinned,
    wait_s), ``load_options`` as :func:`model_loader`'s."""
    from aiayn.serve.models import ModelPool, found_models
    from aiayn.serve.models_server import run_models_server

    pool = ModelPool(found_models(Path(folder)), model_loader(limits, api_key, **load_options), **pool_options)
    body = max(limits.max_body_bytes, BODY_BYTES_PER_TOKEN * max(limits.max_context, 0))
    run_models_server(pool, folder, host, port, limits, api_key, body)


def compile_first(model, graphs: dict, scheduler: Scheduler, mode: str, device: str, say=None,
                  behind: tuple[str, dict] | None = None, draft: bool = False):
    """A language model's decoding step compiled as ``--compile mode`` says (``inference/compiled.py``), on the
    decoding thread as its first chore: the kernels are built for that thread's compute threads, and no request is
    stepped before; a graph for one row and those ``graphs`` asks (``attach``'s ``batches``: a running batch of
    more; ``columns``: a verifying pass of several tokens of one row). With ``behind``
    (the checkpoint and its precision flags), a step not kept yet is compiled by a child process while requests
    decode eagerly, and taken over by a later chore (``inference/compile_behind.py``; ``scheduler.behind``, or
    with ``draft``, the draft model's, ``scheduler.draft_behind``). ``say`` gets its lines (default: standard
    error). Returns the first chore's future (None: not a language model, or ``off``)."""
    if model.config.arch != "decoder-only" or mode == "off":
        return None
    from aiayn.inference.compiled import attach

    if behind is None:
        return scheduler.run_alone(functools.partial(attach, **graphs), model, mode, device, say)
    from aiayn.inference.compile_behind import compile_behind

    def start() -> bool:
        made = compile_behind(model, mode, device, *behind, **graphs, say=say)
        if draft:
            scheduler.draft_behind = made
        else:
            scheduler.behind = made
        if made is not None:  # its take-over waits in a thread of its own, then runs between steps
            threading.Thread(target=_take_over_when_done, args=(scheduler, made), name="aiayn-compile-behind",
                             daemon=True).start()
        return model.runtime.static is not None

    return scheduler.run_alone(start)


def _take_over_when_done(scheduler: Scheduler, behind) -> None:
    """Once the step compiled or loaded behind the decoding is ready: taken over by a chore between two steps."""
    behind.wait()
    scheduler.run_alone(behind.take_over)


def startup_line(served: Served) -> str:
    """What the server says it serves as it starts: the model, its context and its prompt cache's cap."""
    cfg, scheduler = served.product.model.config, served.scheduler
    line = f"aiayn: serving {served.name} ({cfg.arch}, {cfg.kind}), context {scheduler.capacity} tokens"
    cache = getattr(scheduler, "prefix_cache", None)
    if cache is not None:
        line += f", prompt cache up to {cache.max_bytes / 2**20:.0f} MiB ({cache.max_tokens} tokens)"
    return line


def _serve(config, scheduler: Scheduler, parallel) -> None:
    """uvicorn until stopped; under ``--tensor-parallel`` rank 0 leads the other ranks while it serves."""
    if parallel is None:
        serve_until_stopped(config)
        return
    from aiayn.serve.mirror import lead

    leader = lead(scheduler, parallel)
    try:
        serve_until_stopped(config)
    finally:
        leader.stop()
