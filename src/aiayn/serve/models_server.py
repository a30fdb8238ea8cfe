"""``aiayn serve --models DIR``: the folder's models behind one port (``serve/models.py``), each loaded as
``aiayn serve --checkpoint`` loads its one (``server.load_product``, ``build_scheduler``, ``build_app``)."""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from aiayn.serve.http import Limits, Served, base_app, serve_until_stopped, server_config
from aiayn.serve.models import ModelPool, found_models, front_door
from aiayn.serve.server import BODY_BYTES_PER_TOKEN, build_app, build_scheduler, compile_first, load_product


def loader(limits: Limits, api_key: str | None, options: dict, decoding: dict | None = None, device: str = "cpu",
           max_batch: int = 64, wait_ms: float = 5.0, batching: str = "continuous", compile: str = "off"):
    """``load(name, path)`` for :class:`ModelPool`: the model read and served as ``aiayn serve`` serves one
    (``options``: the precision flags, ``int8``, ``int4``, ``bf16``, ``kv_cache_dtype``), its scheduler started; a
    compiled step kept for it is loaded behind its first requests (``--compile``), one not kept is compiled behind
    them by a child process."""
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


def models_app(pool: ModelPool, limits: Limits, api_key: str | None):
    """The front door (``models.front_door``) around its own FastAPI app: ``/v1/models``, ``/health``, the guards;
    its life unloads every model at the end and, with a TTL, reaps idle ones."""
    @asynccontextmanager
    async def lifespan(_app):
        reaper = asyncio.create_task(pool.reap())
        for entry in pool.entries.values():
            if entry.pinned:  # pinned models are loaded at the start and stay
                await pool.release(await pool.acquire(entry.name))
        yield
        reaper.cancel()
        for entry in pool.loaded():
            pool.unload(entry)

    own = base_app(lifespan, limits, api_key)

    @own.get("/v1/models")
    async def models() -> dict:
        """Every model of the folder, loaded or not."""
        return {"object": "list", "data": pool.listing()}

    @own.get("/health")
    async def health() -> dict:
        return pool.health()

    most = max(limits.max_body_bytes, BODY_BYTES_PER_TOKEN * max(limits.max_context, 0))
    app = front_door(pool, own, most)
    app.state = own.state  # the drain flag (serve_until_stopped sets it; the front door answers 503 then)
    return app


def run_models_server(folder: str, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
                      api_key: str | None = None, memory_mb: int | None = None, most: int | None = None,
                      ttl: float | None = None, pinned: tuple[str, ...] = (), wait_s: float = 120.0,
                      **load_options) -> None:
    """Serve every model of ``folder`` until stopped (``memory_mb``, ``most``, ``ttl``, ``pinned``, ``wait_s``: as
    :class:`ModelPool` takes them; ``load_options``: :func:`loader`'s)."""
    limits = limits or Limits()
    found = found_models(Path(folder))
    pool = ModelPool(found, loader(limits, api_key, **load_options), None if memory_mb is None else memory_mb * 2**20,
                     most, ttl, pinned, wait_s)
    app = models_app(pool, limits, api_key)
    print(f"aiayn: serving the {len(found)} models of {folder} ({', '.join(found)}), loaded as they are asked for",
          file=sys.stderr, flush=True)
    serve_until_stopped(server_config(app, host, port, limits))
