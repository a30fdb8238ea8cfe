"""``aiayn serve --models DIR``: the folder's models behind one port (``serve/models.py``), each loaded as
``aiayn serve --checkpoint`` loads its one (``server.model_loader``, which hands this module its pool)."""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager

from aiayn.serve.http import Limits, base_app, serve_until_stopped, server_config
from aiayn.serve.models import ModelPool, front_door


def models_app(pool: ModelPool, limits: Limits, api_key: str | None, max_body: int | None = None):
    """The front door (``models.front_door``) around its own FastAPI app: ``/v1/models``, ``/health``, the guards;
    its life unloads every model at the end and, with a TTL, reaps idle ones. ``max_body``: the largest body it
    reads (default ``limits.max_body_bytes``)."""
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

    app = front_door(pool, own, max_body or limits.max_body_bytes)
    app.state = own.state  # the drain flag (serve_until_stopped sets it; the front door answers 503 then)
    return app


def run_models_server(pool: ModelPool, folder: str, host: str = "127.0.0.1", port: int = 8000,
                      limits: Limits | None = None, api_key: str | None = None, max_body: int | None = None) -> None:
    """Serve ``pool``'s models (those of ``folder``) until stopped."""
    limits = limits or Limits()
    app = models_app(pool, limits, api_key, max_body)
    print(f"aiayn: serving the {len(pool.entries)} models of {folder} ({', '.join(pool.entries)}), loaded as they "
          "are asked for", file=sys.stderr, flush=True)
    serve_until_stopped(server_config(app, host, port, limits))
