"""Several models behind one server (``aiayn serve --models DIR``): llama.cpp's router mode and LM Studio's
just-in-time loading, in one process.

Every checkpoint folder, run folder and GGUF file in ``DIR`` is a model, named by its folder or file (``/v1/models``
lists them all, loaded or not). A request names its model in its JSON body's ``model``; the front door
(:func:`front_door`) makes sure that model is loaded and hands the request, as it came, to that model's own app
(``server.build_app``: the same routes, scheduler and guards as ``aiayn serve --checkpoint``). A model not loaded is
loaded, one load at a time, off the event loop, so the loaded ones keep answering; room is made first within
``memory`` (the loaded models' weights, bytes) and ``most`` (models) by unloading the least recently used idle one
(no request open), never a ``pinned`` one. A request that finds no room (every loaded model busy) waits for one to
go idle, at most ``wait_s``, then gets 503 ``busy``. With ``ttl`` an idle model is unloaded that many seconds after
its last request.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from aiayn.io.files import give_back_memory
from aiayn.serve.openai_schema import OpenAIError, check_model


@dataclass
class Entry:
    """One model of the folder: where it is, and, loaded, its app and what its weights take."""

    name: str
    path: Path
    pinned: bool = False
    served: object | None = None  # the loaded model's ``http.Served``
    app: Callable | None = None  # its ASGI app
    bytes: int = 0  # its weights' bytes, once loaded (before: its files' size)
    open: int = 0  # requests in flight
    used: float = 0.0  # when its last request ended (time.monotonic)
    loads: int = 0
    load_s: float | None = None  # its last load's seconds


def found_models(folder: Path) -> dict[str, Path]:
    """Each checkpoint folder (a ``config.json``), run folder (a ``best/`` one) and ``.gguf`` file in ``folder``,
    by name (the folder's or the file's, without ``.gguf``)."""
    if not folder.is_dir():
        raise ValueError(f"--models: {folder} is not a folder")
    models = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix == ".gguf":
            models[path.stem] = path
        elif path.is_dir() and ((path / "config.json").is_file() or (path / "best" / "config.json").is_file()):
            models[path.name] = path
    if not models:
        raise ValueError(f"--models: no checkpoint folder, run folder or .gguf file in {folder}")
    return models


def weight_bytes(model: torch.nn.Module) -> int:
    """The bytes of a model's tensors (parameters, buffers and converted layers' packed weights), each counted once."""
    seen, total = set(), 0
    for module in model.modules():
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False),
                   *(t for t in vars(module).values() if isinstance(t, torch.Tensor))]
        for t in tensors:
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            if key not in seen:
                seen.add(key)
                total += key[1]
    return total


def files_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ModelPool:
    """The folder's models, loaded on demand within a budget (this module's docstring).

    Args:
        models: name -> path (:func:`found_models`).
        load: ``load(name, path)`` -> (the model's ``Served``, its ASGI app), its scheduler started; run in a thread.
        memory: the most bytes the loaded models' weights may take (None: no bound).
        most: the most models loaded at once (None: no bound).
        ttl: seconds an idle model stays loaded (None: until room is needed).
        pinned: names never unloaded (loaded at the start).
        wait_s: how long a request waits for room before 503.
    """

    def __init__(self, models: dict[str, Path], load: Callable, memory: int | None = None, most: int | None = None,
                 ttl: float | None = None, pinned: tuple[str, ...] = (), wait_s: float = 120.0) -> None:
        unknown = sorted(set(pinned) - set(models))
        if unknown:
            raise ValueError(f"--models-pin: no model named {unknown[0]!r} (there are: {', '.join(models)})")
        self.entries = {name: Entry(name, path, name in pinned) for name, path in models.items()}
        self.load, self.memory, self.most, self.ttl, self.wait_s = load, memory, most, ttl, wait_s
        self.loading = asyncio.Lock()
        self.changed = asyncio.Condition()  # a request ended or a model was unloaded
        self.most_loaded = 0

    def loaded(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.app is not None]

    async def acquire(self, name: str) -> Entry:
        """The model ``name`` loaded and counted busy until :meth:`release`; KeyError for a name not in the
        folder, TimeoutError when no room came within ``wait_s``."""
        entry = self.entries[name]
        deadline = time.monotonic() + self.wait_s
        while entry.app is None:
            async with self.loading:  # one load at a time: a second request for it finds it loaded
                if entry.app is None:
                    await self._make_room(entry, deadline)
                    start = time.monotonic()
                    entry.served, entry.app = await asyncio.to_thread(self.load, entry.name, entry.path)
                    entry.load_s = time.monotonic() - start
                    entry.bytes, entry.loads = weight_bytes(entry.served.product.model), entry.loads + 1
                    self.most_loaded = max(self.most_loaded, len(self.loaded()))
        entry.open += 1
        return entry

    async def release(self, entry: Entry) -> None:
        entry.open -= 1
        entry.used = time.monotonic()
        async with self.changed:
            self.changed.notify_all()

    async def _make_room(self, entry: Entry, deadline: float) -> None:
        """Unload idle models, least recently used first, until ``entry`` fits; wait for one to go idle while none
        is (bounded by ``deadline``)."""
        need = entry.bytes or files_bytes(entry.path)
        while self._over(need):
            idle = sorted((e for e in self.loaded() if e.open == 0 and not e.pinned), key=lambda e: e.used)
            if idle:
                self.unload(idle[0])
                continue
            if not any(e.open for e in self.loaded()):  # nothing will go idle: it can never fit
                raise ValueError(f"model {entry.name!r} does not fit --models-memory beside the pinned models")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            async with self.changed:
                await asyncio.wait_for(self.changed.wait(), left)

    def _over(self, need: int) -> bool:
        loaded = self.loaded()
        return ((self.most is not None and len(loaded) + 1 > self.most)
                or (self.memory is not None and loaded and sum(e.bytes for e in loaded) + need > self.memory))

    def unload(self, entry: Entry) -> None:
        """Stop its scheduler (and a compile behind it) and let its weights go (given back to the system)."""
        scheduler = entry.served.scheduler
        scheduler.stop()
        for behind in (getattr(scheduler, "behind", None), getattr(scheduler, "draft_behind", None)):
            if behind is not None:
                behind.stop()
        entry.served = entry.app = None
        gc.collect()
        give_back_memory()

    async def reap(self) -> None:
        """Unload models idle for ``ttl`` seconds (a task for the server's life)."""
        while self.ttl is not None:
            await asyncio.sleep(min(1.0, self.ttl / 4))
            for entry in self.loaded():
                if entry.open == 0 and not entry.pinned and time.monotonic() - entry.used >= self.ttl:
                    async with self.loading:
                        if entry.app is not None and entry.open == 0:
                            self.unload(entry)

    def listing(self) -> list[dict]:
        """``/v1/models``' data: every model, with whether it is loaded (aiayn's ``status`` field, as llama.cpp's)."""
        return [{"id": e.name, "object": "model", "owned_by": "aiayn",
                 "status": {"value": "loaded" if e.app is not None else "unloaded"}} for e in self.entries.values()]

    def health(self) -> dict:
        loaded = self.loaded()
        return {"status": "ok", "models": len(self.entries), "loaded": [e.name for e in loaded],
                "weights_bytes": sum(e.bytes for e in loaded), "most_loaded_at_once": self.most_loaded,
                "loads": {e.name: e.loads for e in self.entries.values() if e.loads},
                "last_load_s": {e.name: round(e.load_s, 3) for e in self.entries.values() if e.load_s is not None}}


async def _body(receive, most: int) -> bytes | None:
    """The request's whole body (None past ``most`` bytes)."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > most:
            return None
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _admitted(pool: ModelPool, own, max_body: int, receive) -> tuple[bytes, Entry]:
    """A POST's body and its model, loaded and counted busy; an OpenAIError to answer instead."""
    if own.state.draining:  # SIGTERM: the requests in flight finish, new ones are refused
        raise OpenAIError(503, "the server is shutting down")
    body = await _body(receive, max_body)
    if body is None:
        raise OpenAIError(413, f"the body is over {max_body} bytes")
    try:
        name = json.loads(body or b"{}").get("model")
    except (ValueError, AttributeError):
        name = None
    check_model(name, list(pool.entries))  # 404 model_not_found
    try:
        return body, await pool.acquire(name)
    except TimeoutError:
        raise OpenAIError(503, f"busy: no room to load {name!r} within {pool.wait_s:g} s (every loaded model "
                               "is in use); try again shortly") from None
    except ValueError as error:
        raise OpenAIError(400, str(error)) from None


def front_door(pool: ModelPool, own: Callable, max_body: int) -> Callable:
    """The ASGI app: a POST names its model in its body and goes to that model's app (loaded first); everything else
    (``/v1/models``, ``/health``, the key check) to ``own``, the front door's FastAPI app."""
    async def app(scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await own(scope, receive, send)
        try:
            body, entry = await _admitted(pool, own, max_body, receive)
        except OpenAIError as error:  # OpenAI's error body, as every route answers one
            return await error.response()(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # a disconnect, as the route watches for it

        try:
            await entry.app(scope, replay, send)
        finally:
            await pool.release(entry)
    return app
