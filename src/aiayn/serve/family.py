"""The server for the other family members: a language model's routes (POST /generate in ``serve/generate.py``,
/tokenize, the attention pictures, /v1), POST /fill-mask and POST /embed (encoder-only), all through the one
scheduler (``serve/scheduler.py``). The translation routes live in ``serve/app.py``."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import torch
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from aiayn.decoding.prefix import PromptCache
from aiayn.inference.embed import Embedder
from aiayn.inference.fill_mask import MaskFiller
from aiayn.inference.generator import TextGenerator
from aiayn.serve.declared import NONBLANK, Whole, declare_fields
from aiayn.serve.generate import add_generate
from aiayn.serve.http import (
    STATIC,
    base_app,
    check_size,
    health_body,
)
from aiayn.serve.limits import Limits
from aiayn.serve.metrics import add_metrics
from aiayn.serve.openai import add_openai_routes
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.tokens import add_token_routes
from aiayn.visual.attention import lm_attention_for
from aiayn.visual.inside import NoSuchPosition, lm_inside_for


class TextAttentionRequest(BaseModel):
    """A text (a prompt and its continuation) to draw the language model's causal attention over."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(pattern=NONBLANK)


class TextHeadRequest(TextAttentionRequest):
    """Inside one head: the layer, head and query token (0-based) to open."""

    layer: Whole = Field(0, ge=0)
    head: Whole = Field(0, ge=0)
    query: Whole = Field(0, ge=0, description="the query token's position in text (past its end: 404)")


class FillMaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(pattern="<mask>", description="a text with one or more <mask> words to predict")
    top_k: int = Field(5, ge=1, le=100)


class EmbedRequest(BaseModel):
    """Texts to embed, one vector each (the checkpoint's pooling)."""

    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(min_length=1)


def create_family_app(engine: TextGenerator | MaskFiller, limits: Limits, max_batch: int,
                      threads: int | None = None, embedder: Embedder | None = None, name: str = "aiayn",
                      api_key: str | None = None, batching: str = "continuous", wait_ms: float = 5.0) -> FastAPI:
    """The app for a decoder-only (``TextGenerator``) or encoder-only (``MaskFiller``, and an ``Embedder`` for
    /embed) checkpoint; all its computing runs on the scheduler's one thread (generation rows join and leave the
    running batch; fill-mask and embedding requests that arrive together are computed as one batch).
    The OpenAI-compatible routes (``serve/openai.py``) serve it as model ``name``; with ``api_key`` every route
    but /health needs ``Authorization: Bearer KEY``. ``batching="static"``: wait-and-batch generation (a
    batch forms when none runs and ends with its last row), to compare with continuous batching. ``wait_ms``:
    how long the encoder queue waits for requests to batch with."""
    batcher = _family_scheduler(engine, limits, max_batch, threads, embedder, batching, wait_ms)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        yield
        batcher.stop()

    app = base_app(lifespan, limits, api_key)
    app.state.batcher = batcher
    add_metrics(app, batcher)
    _add_page_and_health(app, engine.model.config, limits, batcher)
    if isinstance(engine, TextGenerator):
        chat = None if engine.chat_template is None else \
            (lambda messages, prompt: engine.rendered_ids(engine.chat_template(messages, prompt)))
        add_token_routes(app, engine.tokenizer, batcher.capacity, limits, chat)
        _declare_bounds(app, engine, limits)
        add_generate(app, engine, batcher, limits)
        if getattr(engine.model, "tensor_parallel", 1) == 1:  # split, a rank sees its own heads only: no pictures
            _add_lm_attention(app, engine, batcher, limits)
        add_openai_routes(app, name, limits, engine, batcher)
    else:
        _add_encoder_routes(app, name, limits, batcher, embedder)
    return app


def _declare_bounds(app: FastAPI, generator: TextGenerator, limits: Limits) -> None:
    """What /openapi.json can bound for this model: its layers and heads, its vocabulary, its adapters, the
    server's length limit."""
    cfg, rows = generator.model.config, generator.model.adapter_rows
    adapters = [{"enum": rows.names}] if rows is not None else []
    declare_fields(app, {"TextHeadRequest": {"layer": {"maximum": cfg.n_decoder_layers - 1},
                                             "head": {"maximum": cfg.n_heads - 1}},
                         "DetokenizeRequest": {"tokens": {"items": vocabulary(generator.tokenizer)}},
                         "GenerateRequest": {"adapter": {"anyOf": [*adapters, {"type": "null"}]},
                                             **one_output(limits, ("greedy", "beam", "sample"))}})


def one_output(limits: Limits, strategies: tuple[str, ...]) -> dict:
    """The decoding fields' bounds where a request decodes one output: the strategies the model runs, one
    sequence, the server's length and beam limits."""
    return {"strategy": {"anyOf": [{"enum": list(strategies)}, {"type": "null"}]},
            "num_return_sequences": {"maximum": 1}, "max_new_tokens": {"maximum": limits.max_new_tokens},
            "beam_size": {"maximum": limits.max_beam_size}}


def vocabulary(tokenizer) -> dict:
    """The JSON schema of one of ``tokenizer``'s ids."""
    return {"type": "integer", "minimum": 0, "maximum": len(tokenizer) - 1}


def _family_scheduler(engine: TextGenerator | MaskFiller, limits: Limits, max_batch: int, threads: int | None,
                      embedder: Embedder | None, batching: str, wait_ms: float) -> Scheduler:
    """A generator's scheduler (a KV cache of the context the model takes, a prompt cache) or an encoder's
    (fill-mask and embedding requests batched by ``_encoder_work``)."""
    if isinstance(engine, TextGenerator):
        cfg = engine.model.config
        capacity = cfg.max_len if cfg.positions == "learned" else max(cfg.max_len, limits.max_context)
        prefix = PromptCache(engine.model, max_bytes=limits.prefix_cache_bytes)
        return Scheduler(engine.model, max_batch, capacity, prefix, static=batching == "static", threads=threads,
                         limits=limits)
    return Scheduler(engine.model, max_batch, threads=threads, encode=_encoder_work(engine, embedder),
                     wait_ms=wait_ms, limits=limits)


def _add_page_and_health(app: FastAPI, cfg, limits: Limits, batcher: Scheduler) -> None:
    """GET / (the family's web page) and GET /health."""

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The page for this model: a prompt with the continuation streamed in, or masks with their bars."""
        return FileResponse(STATIC / "family.html")

    @app.get("/health")
    async def health() -> dict:
        """Liveness, the model's dimensions, the limits, and the generation batcher's counts."""
        return health_body(cfg, limits, **batcher.stats())


def _add_encoder_routes(app: FastAPI, name: str, limits: Limits, queue: Scheduler,
                        embedder: Embedder | None) -> None:
    """/fill-mask; with an ``embedder``, /embed and /v1/embeddings; all through the scheduler's queue."""
    _add_fill_mask(app, limits, queue)
    if embedder is None:
        add_openai_routes(app, name, limits)
        return
    _add_embed(app, embedder, limits, queue)

    async def embed(texts: list[str]):
        vectors = torch.stack(await asyncio.wrap_future(queue.submit_encoder(texts, "embed")))  # (N, D)
        return vectors, sum(len(embedder.ids(t)) for t in texts)

    add_openai_routes(app, name, limits, embed=embed)


def _add_lm_attention(app: FastAPI, generator: TextGenerator, batcher: Scheduler, limits: Limits) -> None:
    """/attention and /attention/head of a language model: a text's causal self-attention, run alone between
    two generation steps."""

    @app.post("/attention")
    async def attention(req: TextAttentionRequest) -> dict:
        """{"tokens", "heads", "attention": {"decoder_self": [layer][head][row][col]}}: row i attends to
        columns 0..i (causal) of ``text``, a prompt with its continuation."""
        _check_text(req.text, generator, limits)
        job = batcher.run_alone(lm_attention_for, generator.model, generator.tokenizer, req.text)
        maps = await asyncio.wrap_future(job)
        weights = maps.weights["decoder_self"].round(decimals=4).tolist()
        return {"tokens": maps.target_tokens, "heads": generator.model.config.n_heads,
                "attention": {"decoder_self": weights}}

    @app.post("/attention/head")
    async def attention_head(req: TextHeadRequest) -> dict:
        """Inside one head: for token ``query`` of ``text`` in ``layer``/``head`` (0-based), the query vector,
        keys, values, scores q.k/sqrt(d_k), mask, softmax weights (the /attention numbers) and output."""
        _check_text(req.text, generator, limits)
        job = batcher.run_alone(lm_inside_for, generator.model, generator.tokenizer, req.text, req.layer,
                                req.head, req.query)
        try:
            return (await asyncio.wrap_future(job)).to_dict()
        except NoSuchPosition as err:
            raise HTTPException(404, str(err)) from None
        except ValueError as err:
            raise HTTPException(422, str(err)) from None


def _check_text(text: str, generator: TextGenerator, limits: Limits) -> None:
    """413/422 for a text /attention cannot take."""
    check_size([text], limits)
    if not text:
        raise HTTPException(422, "text: empty; give a prompt and its continuation")
    n_tokens = len(generator.tokenizer.encode(text))
    if n_tokens > limits.max_attention_tokens:
        raise HTTPException(413, f"text has {n_tokens} tokens; /attention takes up to {limits.max_attention_tokens}")


def _encoder_work(filler: MaskFiller, embedder: Embedder | None):
    """What the scheduler computes for a batch of texts with the same options: ``"embed"`` -> one vector
    (D,) per text; ``("fill", top_k)`` -> each text's candidates, or the ValueError its text raised (a text
    without <mask> is its own request's 422, not its batch-mates')."""

    def work(texts: list[str], options) -> list:
        if options == "embed":
            return list(embedder.embed(texts))
        results = []
        for text in texts:
            try:
                results.append(filler.fill(text, options[1]))
            except ValueError as err:
                results.append(err)
        return results

    return work


def _add_fill_mask(app: FastAPI, limits: Limits, queue: Scheduler) -> None:
    @app.post("/fill-mask")
    async def fill_mask(req: FillMaskRequest) -> dict:
        """{"masks": [[{"token", "id", "probability"}, ...] per <mask>]}; a text without <mask> is 422."""
        check_size([req.text], limits)
        (masks,) = await asyncio.wrap_future(queue.submit_encoder([req.text], ("fill", req.top_k)))
        if isinstance(masks, ValueError):  # a text without <mask>, or too long: the client's mistake
            raise HTTPException(422, str(masks))
        return {"masks": [[{"token": c.token, "id": c.token_id, "probability": round(c.probability, 4)}
                           for c in cands] for cands in masks]}


def _add_embed(app: FastAPI, embedder: Embedder, limits: Limits, queue: Scheduler) -> None:
    @app.post("/embed")
    async def embed(req: EmbedRequest) -> dict:
        """{"embeddings": [[float] per text], "dimension", "pooling", "normalized"}: one vector per text, pooled
        as the checkpoint says (an imported sentence-transformers folder's pooling, else mean)."""
        check_size(req.texts, limits)
        vectors = torch.stack(await asyncio.wrap_future(queue.submit_encoder(req.texts, "embed")))  # (N, D)
        return {"embeddings": vectors.tolist(), "dimension": vectors.size(1), "pooling": embedder.pooling.mode,
                "normalized": embedder.pooling.normalize}
