"""The pictures of the inside, as routes: POST /attention (every head's weights), POST /attention/head (one
head's query, keys, scores and output) and, for a CMLM or CTC translator, POST /refinement. Each runs alone
between two decoding steps of the scheduler; a model split over processes has none (a rank sees its own heads)."""

from __future__ import annotations

import asyncio
from typing import Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from aiayn.serve.declared import NONBLANK, ExactlyOne, Whole
from aiayn.serve.http import Served, check_size
from aiayn.serve.limits import Limits
from aiayn.visual.attention import attention_for, lm_attention_for
from aiayn.visual.experts import routes_for
from aiayn.visual.inside import NoSuchPosition, inside_for, lm_inside_for
from aiayn.visual.refinement import alignment_for, refinement_for


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


class TextInput(ExactlyOne):
    """A text (a prompt and its continuation), or its token ids (a rendered conversation exactly as it was decoded:
    the ``prompt_token_ids`` and ``token_ids`` a /v1 answer returns with ``return_token_ids``)."""

    model_config = ConfigDict(extra="forbid")
    one_of = ("text", "ids")
    text: str = Field(None, pattern=NONBLANK)  # exactly one of text and ids; neither may be null
    ids: list[Whole] = Field(None, min_length=1)


class TextAttentionRequest(TextInput):
    """What to draw the language model's causal attention over; ``row``: that token's row alone."""

    row: Whole | None = Field(None, ge=0, description="only this token's row of every layer and head (the answer "
                                                      "grows with the length, not its square; past the end: 404)")


class TextHeadRequest(TextInput):
    """Inside one head: the layer, head and query token (0-based) to open."""

    layer: Whole = Field(0, ge=0)
    head: Whole = Field(0, ge=0)
    query: Whole = Field(0, ge=0, description="the query token's position in text (past its end: 404)")


async def _alone(served: Served, work, *args):
    """``work(*args)`` run alone between two steps; a position past the text is 404, another bad choice 422."""
    try:
        return await asyncio.wrap_future(served.scheduler.run_alone(work, *args))
    except NoSuchPosition as err:
        raise HTTPException(404, str(err)) from None
    except ValueError as err:
        raise HTTPException(422, str(err)) from None


def add_translation_pictures(app: FastAPI, served: Served) -> None:
    """/attention, /attention/head and /refinement of a translator (an autoregressive one draws attention; a
    CMLM's or CTC model's one picture is /refinement)."""
    translator, limits = served.product, served.limits
    cfg = translator.model.config

    @app.post("/attention", include_in_schema=not cfg.non_autoregressive)  # CMLM, CTC: none (422, not in schema)
    async def attention(req: AttentionRequest) -> dict:
        """Tokens and weights [layer][head][row][col] for encoder, decoder_self and cross attention."""
        _check_pair(req, translator, limits)
        maps = await _alone(served, attention_for, translator, req.source, req.target)
        return {**maps.to_dict(), "heads": cfg.n_heads}

    @app.post("/refinement", include_in_schema=cfg.non_autoregressive)
    async def refinement(req: RefinementRequest) -> dict:
        """A CMLM's Mask-Predict on ``source``: {"source_tokens", "steps": [{"tokens", "probabilities",
        "predicted"}] per iteration, "translation"}; a CTC model's one pass: one step (what each upsampled position
        emits, "predicted": kept by the collapse) and "inputs" (the upsampled source pieces)."""
        if not cfg.non_autoregressive:
            raise HTTPException(422, "refinement: this checkpoint is autoregressive; Mask-Predict needs a CMLM, "
                                     "a best path a CTC model")
        _check_pair(AttentionRequest(source=req.source), translator, limits, maps=False)
        if cfg.kind == "ctc":
            return (await _alone(served, alignment_for, translator, req.source)).to_dict()
        found = await _alone(served, refinement_for, translator, req.source, req.iterations, req.length_beam)
        return found.to_dict()

    @app.post("/attention/head", include_in_schema=not cfg.non_autoregressive)
    async def attention_head(req: HeadRequest) -> dict:
        """Inside one head: for row ``query`` of ``kind`` in ``layer``/``head`` (0-based), the query vector,
        keys, values, scores q.k/sqrt(d_k), mask, softmax weights (the /attention numbers) and output."""
        _check_pair(req, translator, limits)
        found = await _alone(served, inside_for, translator, req.source, req.target, req.kind, req.layer, req.head,
                             req.query)
        return found.to_dict()


def add_lm_pictures(app: FastAPI, served: Served) -> None:
    """/attention and /attention/head of a language model: a text's causal self-attention."""
    generator, limits = served.product, served.limits

    @app.post("/attention")
    async def attention(req: TextAttentionRequest) -> dict:
        """{"tokens", "heads", "attention": {"decoder_self": [layer][head][row][col]}}: row i attends to
        columns 0..i (causal) of ``text`` (or ``ids``), a prompt with its continuation. With ``row``, that row
        alone ([layer][head][1][col]) and, for a model with experts, "experts": [layer][expert], the router's
        weights for that token."""
        given = _check_text(req, generator, limits)
        if req.row is not None and req.row >= _count(req, generator):
            raise HTTPException(404, f"row: {req.row} is past the last token ({_count(req, generator) - 1})")
        maps = await _alone(served, lm_attention_for, generator.model, generator.tokenizer, given)
        weights = maps.weights["decoder_self"]  # (L, H, T, T)
        rows = slice(None) if req.row is None else slice(req.row, req.row + 1)
        answer = {"tokens": maps.target_tokens, "heads": generator.model.config.n_heads,
                  "attention": {"decoder_self": weights[:, :, rows].round(decimals=4).tolist()}}
        if req.row is not None and generator.model.config.n_experts:
            routes = await _alone(served, routes_for, generator.model, generator.tokenizer, given)
            answer["experts"] = routes.weights[:, req.row].round(decimals=4).tolist()  # (L, E)
        return answer

    @app.post("/attention/head")
    async def attention_head(req: TextHeadRequest) -> dict:
        """Inside one head: for token ``query`` of ``text`` in ``layer``/``head`` (0-based), the query vector,
        keys, values, scores q.k/sqrt(d_k), mask, softmax weights (the /attention numbers) and output."""
        given = _check_text(req, generator, limits)
        found = await _alone(served, lm_inside_for, generator.model, generator.tokenizer, given, req.layer,
                             req.head, req.query)
        return found.to_dict()


def _check_pair(req: AttentionRequest, translator, limits: Limits, maps: bool = True) -> None:
    """413/422 for a pair /attention cannot take; ``maps``: attention pictures (a CMLM has none: 422)."""
    if maps and translator.model.config.non_autoregressive:
        raise HTTPException(422, "attention: drawn for autoregressive models; a CMLM's or CTC model's one is "
                                 "POST /refinement")
    check_size([req.source] + ([req.target] if req.target else []), limits)
    if not req.source.strip():
        raise HTTPException(422, "source: give a sentence to attend over")
    _check_tokens("source", len(translator.source_ids(req.source)), limits)


def _check_text(req: TextInput, generator, limits: Limits) -> str | list[int]:
    """The text or the ids of ``req``; 413/422 for what /attention cannot take."""
    if req.ids is not None:
        vocab = len(generator.tokenizer)
        bad = next((t for t in req.ids if t >= vocab), None)
        if bad is not None:
            raise HTTPException(422, f"ids: {bad} is not an id of the vocabulary (0..{vocab - 1})")
        _check_tokens("ids", len(req.ids), limits)
        return req.ids
    check_size([req.text], limits)
    if not req.text:
        raise HTTPException(422, "text: empty; give a prompt and its continuation")
    _check_tokens("text", _count(req, generator), limits)
    return req.text


def _count(req: TextInput, generator) -> int:
    return len(req.ids) if req.ids is not None else len(generator.tokenizer.encode(req.text))


def _check_tokens(field: str, n_tokens: int, limits: Limits) -> None:
    if n_tokens > limits.max_attention_tokens:
        raise HTTPException(413, f"{field} has {n_tokens} tokens; /attention takes up to {limits.max_attention_tokens}")
