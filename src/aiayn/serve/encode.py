"""An encoder-only model's routes: POST /fill-mask and, with an ``Embedder``, POST /embed and /v1/embeddings;
requests that arrive together with the same options are computed as one batch by the scheduler."""

from __future__ import annotations

import asyncio

import torch
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from aiayn.inference.embed import Embedder, Pooling
from aiayn.inference.fill_mask import MaskFiller
from aiayn.serve.http import Served, add_page_and_health, check_size
from aiayn.serve.limits import Limits
from aiayn.serve.openai import add_openai_routes
from aiayn.serve.scheduler import Scheduler


class FillMaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(pattern="<mask>", description="a text with one or more <mask> words to predict")
    top_k: int = Field(5, ge=1, le=100)


class EmbedRequest(BaseModel):
    """Texts to embed, one vector each (the checkpoint's pooling)."""

    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(min_length=1)


def product(model, tokenizers, folder, decoding, device: str, **precision) -> tuple[MaskFiller, Embedder]:
    """The fill-mask product of a loaded encoder and the embedder beside it, sharing its one inference copy (an
    encoder takes no reduced precision here: ``precision`` is not read)."""
    filler = MaskFiller(model, tokenizers, device, own=True)
    return filler, Embedder(filler.model, tokenizers, Pooling.load(folder), device, own=True)


def scheduler(filler: MaskFiller, limits: Limits, embedder: Embedder | None = None, **options) -> Scheduler:
    """The scheduler of an encoder: its queue batches fill-mask and embedding requests (``_encoder_work``)."""
    return Scheduler(filler.model, encode=_encoder_work(filler, embedder), limits=limits, **options)


def add_routes(app: FastAPI, served: Served) -> None:
    """GET / (the family's page), GET /health, /fill-mask; with an embedder, /embed and /v1/embeddings."""
    add_page_and_health(app, served, "family.html")
    _add_fill_mask(app, served.limits, served.scheduler)
    embedder, queue = served.embedder, served.scheduler
    if embedder is None:
        add_openai_routes(app, served.name, served.limits)
        return
    _add_embed(app, embedder, served.limits, queue)

    async def embed(texts: list[str]):
        vectors = torch.stack(await asyncio.wrap_future(queue.submit_encoder(texts, "embed")))  # (N, D)
        return vectors, sum(len(embedder.ids(t)) for t in texts)

    add_openai_routes(app, served.name, served.limits, embed=embed)


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
