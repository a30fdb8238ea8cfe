"""What every aiayn server shares: the static files and /docs, the guards (body size, slow clients, 422 without
the input, 500 without a traceback), the size check of texts, /health's body, and uvicorn's config."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import signal
import typing
from dataclasses import asdict
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from aiayn.decoding.config import BOUNDS, DecodingConfig, names
from aiayn.serve.declared import LogitBias, number, whole
from aiayn.serve.jobs import Refused
from aiayn.serve.limits import Limits

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("aiayn.serve")


def _decoding_fields() -> dict:
    """Every ``DecodingConfig`` field as an optional request field (unset: the server's default)."""
    hints = typing.get_type_hints(DecodingConfig)
    numbers = {int: (int, whole), float: (float, number), int | None: (int, whole), float | None: (float, number)}
    fields = {}
    for f in dataclasses.fields(DecodingConfig):
        kind, check = numbers.get(hints[f.name], (hints[f.name], None))
        kind = typing.Literal[f.metadata["choices"]] if "choices" in f.metadata else kind
        kind = LogitBias if f.name == "logit_bias" else kind  # over HTTP, OpenAI's object (the config takes a dict)
        extra = [Field(**BOUNDS[f.name])] if f.name in BOUNDS else []  # on the value's type: the schema states them
        extra += [BeforeValidator(check)] if check else []  # JSON's numbers, not true or "1"
        kind = typing.Annotated[(kind, *extra)] if extra else kind
        fields[f.name] = (kind | None, Field(None, description=f.metadata["help"]))
    return fields


DecodingOptions: type[BaseModel] = create_model(
    "DecodingOptions", __config__=ConfigDict(extra="forbid"), __doc__="Decoding options: unset ones take the "
    "server's defaults (the checkpoint's generation.json, then aiayn serve's flags).", **_decoding_fields())


def request_decoding(req: BaseModel, base: DecodingConfig) -> DecodingConfig:
    """``base`` (the server's defaults) with the request's decoding fields replaced (null, as unset: the server's
    value); an invalid value is 422 naming the field. What the model cannot run or the server will not is the
    scheduler's one admission check (:func:`native_refusal` maps it)."""
    try:
        return base.replace(**req.model_dump(exclude_unset=True, exclude_none=True, include=set(names())))
    except ValueError as err:
        raise HTTPException(422, str(err)) from None


NATIVE_STATUS = {"invalid": 422, "too_long": 422, "busy": 429}  # the scheduler's refusals on the native routes


def native_refusal(err: Refused) -> HTTPException:
    """The native routes' answer to a refused job: 422 (a decoding the model cannot run, or over a length
    limit) or 429 (busy), with the scheduler's message."""
    return HTTPException(NATIVE_STATUS[err.refusal.kind], err.refusal.message)


def check_size(texts: list[str], limits: Limits) -> None:
    """Sizes over the limits -> 413; text that is not valid Unicode (a lone surrogate such as \\ud800,
    which JSON can carry) -> 422."""
    if (over := limits.oversize(texts, "text")) is not None:
        raise HTTPException(413, over)
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise HTTPException(422, f"text {i}: not valid Unicode at character {err.start} (a lone "
                                     "surrogate); send UTF-8 text") from None


def base_app(lifespan, limits: Limits, api_key: str | None = None) -> FastAPI:
    """What every server shares: the static files, /docs, the guards (with ``api_key``, the key check)."""
    app = FastAPI(title="aiayn", description="Transformer server (Attention Is All You Need)",
                  lifespan=lifespan, docs_url=None, redoc_url=None)  # /docs is our own page: no CDN
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _add_guards(app, limits)
    app.state.draining = False
    app.add_middleware(Draining, state=app.state)
    if api_key:
        app.add_middleware(BearerKey, key=api_key)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        """The API from /openapi.json, rendered by a page of ours (no script from elsewhere)."""
        return FileResponse(STATIC / "docs.html")

    return app


class Draining:
    """ASGI middleware: once the server is shutting down (SIGTERM), new requests get 503 while those in flight
    finish."""

    def __init__(self, app, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and self.state.draining:
            response = JSONResponse({"detail": "shutting down: try another server or again later"},
                                    status_code=503, headers={"Connection": "close"})
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


class BearerKey:
    """ASGI middleware: every path but /health and the page's own files (``PAGE_FILES``: they hold no data; the
    page asks for the key and sends it) needs ``Authorization: Bearer KEY`` or Anthropic's ``x-api-key: KEY`` (else
    401, in OpenAI's and Anthropic's error shapes too). Keys are compared in constant time and never logged."""

    PAGE_FILES = ("/", "/complete")

    def __init__(self, app, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        page = scope.get("method") == "GET" and (path in self.PAGE_FILES or path.startswith("/static/"))
        if scope["type"] != "http" or path == "/health" or page:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        given = token.strip() if scheme.lower() == b"bearer" else headers.get(b"x-api-key", b"")  # Anthropic's
        if given and hmac.compare_digest(given, self.key):
            return await self.app(scope, receive, send)
        message = "missing or wrong API key: send the header Authorization: Bearer KEY (or x-api-key: KEY)"
        response = JSONResponse({"detail": message, "type": "error",  # the native, OpenAI and Anthropic shapes
                                 "error": {"message": message, "type": "invalid_request_error", "param": None,
                                           "code": "invalid_api_key"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413, whether it declares its length or not
    (a chunked body is counted as it arrives and cut off at the limit); a body that does not arrive
    within ``timeout_s`` gets 408. Once the body is in, the answer takes as long as it takes (a stream)."""

    def __init__(self, app, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        received, whole = 0, False

        async def counted():
            nonlocal received, whole
            if whole:  # the body is in: what is left to receive is the client's disconnect, as late as it comes
                return await receive()  # (a streamed answer waits on it the whole time it streams)
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except TimeoutError:
                raise HTTPException(408, f"request body not received within {self.timeout_s:g} s") from None
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, f"request body over {self.max_bytes} bytes")
            whole = message["type"] != "http.request" or not message.get("more_body", False)
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


@dataclasses.dataclass
class Served:
    """What a route module reads: the ``product`` that computes (a ``Translator``, ``TextGenerator`` or
    ``MaskFiller``: ``inference/``), the one ``scheduler`` it computes on, the server's ``limits``, the model's
    ``name`` on /v1, an encoder's ``embedder`` (/embed), ``info`` to add to /health, and a language model's ``mcp``
    tools (``serve/mcp_tools.py``: ``--mcp``)."""

    product: typing.Any
    scheduler: typing.Any
    limits: Limits
    name: str = "aiayn"
    embedder: typing.Any = None
    info: dict = dataclasses.field(default_factory=dict)
    mcp: typing.Any = None


def add_page_and_health(app: FastAPI, served: Served, page: str, **extra) -> None:
    """GET / (the page ``static/PAGE``) and GET /health (:func:`health_body` with the scheduler's counts and
    ``extra``)."""
    cfg = served.product.model.config

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / page)

    @app.get("/health")
    async def health() -> dict:
        """Liveness, the model's dimensions, the limits and the scheduler's counts."""
        return health_body(cfg, served.limits, **served.scheduler.stats(), **step_state(served), **extra)


def step_state(served: Served) -> dict:
    """A language model's decoding step: ``compiled`` (in use), ``compiling`` (compiled, or a kept one loaded,
    behind the decoding: ``inference/compile_behind.py``) or ``eager``."""
    model, behind = served.product.model, getattr(served.scheduler, "behind", None)
    if model.config.arch != "decoder-only":
        return {}
    compiling = behind is not None and behind.waiting
    return {"decoding_step": "compiled" if model.runtime.static is not None else "compiling" if compiling else "eager"}


def health_body(cfg, limits: Limits, **counts) -> dict:
    """What GET /health answers: liveness, the model's dimensions, the limits, and the engine's counts."""
    model = {k: getattr(cfg, k) for k in ("arch", "kind", "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers")}
    model.update(cmlm=cfg.kind == "cmlm", ctc_upsample=cfg.ctc_upsample or 0)  # the fields before ``kind``, kept
    return {"status": "ok", "model": model, "limits": asdict(limits), **counts}


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, limits: Limits = Limits(),
                  log_level: str = "info"):
    """uvicorn's config for ``app``: slow clients time out (headers and body within
    ``limits.read_timeout_s``, idle keep-alive 5 s), at most ``limits.max_connections`` at once; after SIGTERM
    the requests in flight get ``limits.shutdown_grace_s``."""
    import uvicorn

    from aiayn.serve.slow import header_timeout_protocol

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_keep_alive=5,
                          limit_concurrency=limits.max_connections, timeout_graceful_shutdown=limits.shutdown_grace_s,
                          http=header_timeout_protocol(limits.read_timeout_s))


def serve_until_stopped(config) -> None:
    """Run uvicorn until SIGTERM or Ctrl-C: from then on new requests get 503 (``Draining``), listening
    stops, and the requests in flight finish within the grace period; then the app shuts down."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            config.app.state.draining = True
            super().handle_exit(sig, frame)

    # uvicorn raises the signal it caught again once it has shut down; a SIGTERM that was handled is then a
    # clean exit (0), not a death by signal
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        Server(config).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
