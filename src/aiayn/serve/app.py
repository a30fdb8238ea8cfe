"""The FastAPI app: POST /translate, POST /attention, POST /attention/head, GET /health, GET / (the web page),
docs at /docs."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator

from aiayn.serve.batcher import DynamicBatcher, Options
from aiayn.serve.limits import Limits
from aiayn.translate import Translator
from aiayn.visual.attention import attention_for
from aiayn.visual.inside import inside_for

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("aiayn.serve")


class TranslateRequest(BaseModel):
    """One ``text`` or a list of ``texts``, and optional decoding options (server defaults otherwise)."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    texts: list[str] | None = None
    beam_size: int | None = Field(None, ge=1, le=16, description="1 = greedy")
    length_penalty: float | None = Field(None, ge=0.0, le=5.0, allow_inf_nan=False, description="GNMT alpha")
    max_new_tokens: int | None = Field(None, ge=1, description="cap on the translation's length in tokens")

    @model_validator(mode="after")
    def _one_of(self) -> TranslateRequest:
        if (self.text is None) == (self.texts is None):
            raise ValueError('give exactly one of "text" or "texts"')
        return self


class AttentionRequest(BaseModel):
    """A source sentence and, optionally, the target to force (default: the model's translation)."""

    model_config = ConfigDict(extra="forbid")
    source: str
    target: str | None = None


class HeadRequest(AttentionRequest):
    """Inside one head: which attention, layer, head and query row (0-based) to open."""

    kind: Literal["encoder", "decoder_self", "cross"] = "cross"
    layer: int = Field(0, ge=0)
    head: int = Field(0, ge=0)
    query: int = Field(0, ge=0, description="the row: a source token (encoder) or a decoder input token")


def _check_size(texts: list[str], limits: Limits) -> None:
    """Sizes over the limits -> 413; text that is not valid Unicode (a lone surrogate such as \\ud800,
    which JSON can carry) -> 422."""
    if len(texts) > limits.max_texts:
        raise HTTPException(413, f"too many texts: {len(texts)} > {limits.max_texts} per request")
    for i, text in enumerate(texts):
        if len(text) > limits.max_chars:
            raise HTTPException(413, f"text {i} has {len(text)} characters; the limit is {limits.max_chars}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise HTTPException(422, f"text {i}: not valid Unicode at character {err.start} (a lone "
                                     "surrogate); send UTF-8 text") from None


def _options(req: TranslateRequest, translator: Translator, limits: Limits) -> Options:
    if req.max_new_tokens is not None and req.max_new_tokens > limits.max_new_tokens:
        raise HTTPException(422, f"max_new_tokens: {req.max_new_tokens} > the server's limit {limits.max_new_tokens}")
    return Options(req.beam_size or translator.beam_size,
                   translator.alpha if req.length_penalty is None else req.length_penalty,
                   req.max_new_tokens or limits.max_new_tokens)


def create_app(translator, limits: Limits = Limits(), max_batch: int = 32, wait_ms: float = 5.0,
               info: dict | None = None, threads: int | None = None) -> FastAPI:
    """The app around an engine: a ``Translator`` (/translate, /attention), a ``TextGenerator`` (/generate,
    with continuous batching) or a ``MaskFiller`` (/fill-mask). Its batcher starts and stops with the app;
    all its computing runs on one thread with ``threads`` compute threads (``serve/threads.py``)."""
    from aiayn.fill_mask import MaskFiller
    from aiayn.generation import TextGenerator

    if isinstance(translator, (TextGenerator, MaskFiller)):
        from aiayn.serve.family import create_family_app

        return create_family_app(translator, limits, max_batch, threads)

    def translate(texts: list[str], o: Options) -> list[str]:
        return translator.translate(texts, max_batch, beam_size=o.beam_size, alpha=o.alpha,
                                    max_new_tokens=o.max_new_tokens)

    batcher = DynamicBatcher(translate, max_batch, wait_ms, threads)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()

    app = _base_app(lifespan, limits)
    app.state.batcher = batcher
    _add_routes(app, translator, batcher, limits, info or {})
    return app


def _base_app(lifespan, limits: Limits) -> FastAPI:
    """What every server shares: the static files, /docs, the guards."""
    app = FastAPI(title="aiayn", description="Transformer server (Attention Is All You Need)",
                  lifespan=lifespan, docs_url=None, redoc_url=None)  # /docs is our own page: no CDN
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _add_guards(app, limits)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        """The API from /openapi.json, rendered by a page of ours (no script from elsewhere)."""
        return FileResponse(STATIC / "docs.html")

    return app


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413, whether it declares its length or not
    (a chunked body is counted as it arrives and cut off at the limit); a body that does not arrive
    within ``timeout_s`` gets 408."""

    def __init__(self, app, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        received = 0

        async def counted():
            nonlocal received
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except TimeoutError:
                raise HTTPException(408, f"request body not received within {self.timeout_s:g} s") from None
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, f"request body over {self.max_bytes} bytes")
            return message

        await self.app(scope, counted, send)

    async def _too_large(self, scope, receive, send) -> None:
        response = JSONResponse({"detail": f"request body over {self.max_bytes} bytes"}, status_code=413)
        await response(scope, receive, send)


def _add_guards(app: FastAPI, limits: Limits) -> None:
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.read_timeout_s)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, err: RequestValidationError):
        """422 with where and what; the offending input is left out (NaN or a lone surrogate would not
        encode as JSON, and the client has it anyway)."""
        detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in err.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, err: Exception):
        log.exception("internal error")
        return JSONResponse({"detail": f"internal error: {type(err).__name__}"}, status_code=500)


def health_body(cfg, limits: Limits, **counts) -> dict:
    """What GET /health answers: liveness, the model's dimensions, the limits, and the engine's counts."""
    model = {k: getattr(cfg, k) for k in ("arch", "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers")}
    return {"status": "ok", "model": model, "limits": asdict(limits), **counts}


def _add_routes(app: FastAPI, translator: Translator, batcher: DynamicBatcher, limits: Limits,
                info: dict) -> None:
    cfg = translator.model.config

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/health")
    async def health() -> dict:
        """Liveness, the model's dimensions, the limits and how many batches were decoded."""
        return health_body(cfg, limits, batches=batcher.batches, beam_size=translator.beam_size, **info)

    @app.post("/translate")
    async def translate(req: TranslateRequest) -> dict:
        """Translate ``text`` -> {"translation"} or ``texts`` -> {"translations"}."""
        texts = [req.text] if req.text is not None else req.texts
        if not texts:
            raise HTTPException(422, "texts: give at least one text")
        _check_size(texts, limits)
        results = await batcher.submit(texts, _options(req, translator, limits))
        return {"translation": results[0]} if req.text is not None else {"translations": results}

    @app.post("/attention")
    async def attention(req: AttentionRequest) -> dict:
        """Tokens and weights [layer][head][row][col] for encoder, decoder_self and cross attention."""
        _check_attention(req, translator, limits)
        maps = await batcher.run_alone(attention_for, translator, req.source, req.target)
        return {**maps.to_dict(), "heads": cfg.n_heads}

    @app.post("/attention/head")
    async def attention_head(req: HeadRequest) -> dict:
        """Inside one head: for row ``query`` of ``kind`` in ``layer``/``head`` (0-based), the query vector,
        keys, values, scores q.k/sqrt(d_k), mask, softmax weights (the /attention numbers) and output."""
        _check_attention(req, translator, limits)
        try:
            found = await batcher.run_alone(inside_for, translator, req.source, req.target, req.kind, req.layer,
                                            req.head, req.query)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return found.to_dict()


def _check_attention(req: AttentionRequest, translator: Translator, limits: Limits) -> None:
    """413/422 for a pair /attention cannot take."""
    _check_size([req.source] + ([req.target] if req.target else []), limits)
    if not req.source.strip():
        raise HTTPException(422, "source: give a sentence to attend over")
    n_tokens = len(translator.source_ids(req.source))
    if n_tokens > limits.max_attention_tokens:
        raise HTTPException(413, f"source has {n_tokens} tokens; /attention takes up to {limits.max_attention_tokens}")


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, limits: Limits = Limits(),
                  log_level: str = "info"):
    """uvicorn's config for ``app``: slow clients time out (headers and body within
    ``limits.read_timeout_s``, idle keep-alive 5 s), at most ``limits.max_connections`` at once."""
    import uvicorn

    from aiayn.serve.slow import header_timeout_protocol

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_keep_alive=5,
                          limit_concurrency=limits.max_connections,
                          http=header_timeout_protocol(limits.read_timeout_s))


def run_server(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, limits: Limits = Limits(),
               beam_size: int = 4, int8: bool = False, device: str = "cpu", max_batch: int = 32,
               wait_ms: float = 5.0, bf16: bool = False) -> None:
    """Load the checkpoint and serve it with uvicorn until interrupted."""
    import uvicorn

    from aiayn.fill_mask import MaskFiller
    from aiayn.generation import TextGenerator
    from aiayn.inference import load_checkpoint
    from aiayn.serve.threads import single_threaded_main

    threads = single_threaded_main()  # the decoding thread alone computes in parallel (serve/threads.py)
    model, tokenizers = load_checkpoint(checkpoint)  # read once; the engine follows the family member
    if model.config.arch == "decoder-only":
        engine = TextGenerator(model, tokenizers, device, bf16=bf16)
    elif model.config.arch == "encoder-only":
        engine = MaskFiller(model, tokenizers, device)
    else:
        engine = Translator(model, tokenizers, device, beam_size=beam_size, int8=int8, bf16=bf16)
    app = create_app(engine, limits, max_batch, wait_ms, threads=threads)
    uvicorn.Server(server_config(app, host, port, limits)).run()
