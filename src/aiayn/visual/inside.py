"""Inside one head (section 3.2.1): for one query token of one head, the arithmetic behind its attention
weights: q, the keys, the scores q.k / sqrt(d_k), the mask, the softmax weights and the weighted sum of the
values, taken from the same forward pass that draws the heatmaps."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from aiayn.model.attention import MultiHeadAttention, attention_scores
from aiayn.visual.attention import AttentionMaps, attention_for, lm_attention_for


class NoSuchPosition(ValueError):
    """A query position past the text (the server answers 404: the schema cannot bound it, the text can)."""


@dataclass
class HeadInside:
    """One query row of one head. Vectors are d_k long; per-key lists are as long as the keys.

    ``weights`` are the heatmap's numbers (the reference attention of that forward pass); ``output`` =
    sum_j weights[j] * values[j], the head's output for the query before W^O. ``kv_head``: the key/value
    head this query head reads (itself, but with grouped-query attention the one its group shares).
    """

    kind: str
    layer: int
    head: int
    kv_head: int
    group: int  # query heads sharing kv_head (1 without grouped-query attention)
    query_index: int
    query_token: str
    key_tokens: list[str]
    scale: float  # sqrt(d_k)
    query: list[float]
    keys: list[list[float]]
    values: list[list[float]]
    scores: list[float]  # q.k_j / sqrt(d_k), before the mask
    mask: list[bool]  # True = may attend
    weights: list[float]
    output: list[float]

    def to_dict(self, digits: int = 4) -> dict:
        """JSON-ready; numbers rounded as ``AttentionMaps.to_dict`` rounds them, so equal weights stay equal."""
        out = asdict(self)
        for name in ("query", "keys", "values", "scores", "weights", "output"):
            out[name] = torch.tensor(out[name]).round(decimals=digits).tolist()
        out["scale"] = round(self.scale, digits)
        return out


def attention_module(model, kind: str, layer: int) -> MultiHeadAttention:
    """The attention block that draws ``kind`` (encoder | decoder_self | cross) in ``layer``."""
    if kind == "encoder":
        return model.encoder.layers[layer].self_attn
    block = model.decoder.layers[layer]
    return block.self_attn if kind == "decoder_self" else block.cross_attn


def _captured(module: MultiHeadAttention, run: Callable[[], AttentionMaps]) -> tuple[AttentionMaps, tuple, Tensor]:
    """Run ``run`` (which draws attention maps) and return its maps, the arguments ``module`` got in that
    drawing pass (query input, key/value input, mask) and the weights it gave back (B, H, T, S)."""
    seen = []

    def hook(_module, args, kwargs, output):
        if kwargs.get("need_weights"):  # the drawing pass, not the decoding before it
            seen.append(((*args, kwargs.get("mask"))[:3], output[1]))

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        maps = run()
    finally:
        handle.remove()
    (inputs, weights), = seen
    return maps, inputs, weights


@torch.no_grad()
def inside_head(module: MultiHeadAttention, run: Callable[[], AttentionMaps], kind: str, layer: int, head: int,
                query: int) -> HeadInside:
    """The numbers of ``head``'s row ``query`` in ``module``, from the pass ``run`` draws."""
    maps, (query_in, kv_in, mask), weights = _captured(module, run)
    rows, cols = maps.axes(kind)
    if not 0 <= query < len(rows):
        raise NoSuchPosition(f"query: {query} is not a token position (0 to {len(rows) - 1})")
    q, k, v = module.heads(query_in, kv_in)  # (B, H, T, D), (B, H_kv, S, D), (B, H_kv, S, D)
    group = module.n_heads // module.n_kv_heads
    kv_head = head // group  # grouped-query attention: the head its group shares
    q, k, v = q[0, head, query].float(), k[0, kv_head].float(), v[0, kv_head].float()  # (D,), (S, D), (S, D)
    visible = torch.ones(k.size(0), dtype=torch.bool, device=k.device) if mask is None else \
        mask.expand(weights.shape)[0, head, query]  # (S,)
    w = weights[0, head, query].float()  # (S,)
    return HeadInside(kind, layer, head, kv_head, group, query, rows[query], cols, math.sqrt(q.numel()), q.tolist(),
                      k.tolist(), v.tolist(), attention_scores(q[None], k)[0].tolist(), visible.tolist(), w.tolist(),
                      (w @ v).tolist())


def _check(model, kind: str, layer: int, head: int, kinds: tuple[str, ...]) -> None:
    cfg = model.config
    layers = cfg.n_encoder_layers if kind == "encoder" else cfg.n_decoder_layers
    if kind not in kinds:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(kinds)}")
    if not 0 <= layer < layers:
        raise ValueError(f"layer: {layer} is not a layer of {kind} (0 to {layers - 1})")
    if not 0 <= head < cfg.n_heads:
        raise ValueError(f"head: {head} is not a head (0 to {cfg.n_heads - 1})")


def inside_for(translator, source: str, target: str | None, kind: str, layer: int, head: int,
               query: int) -> HeadInside:
    """:func:`inside_head` of a translator's model on the pair :func:`attention_for` draws."""
    _check(translator.model, kind, layer, head, ("encoder", "decoder_self", "cross"))
    module = attention_module(translator.model, kind, layer)
    return inside_head(module, lambda: attention_for(translator, source, target), kind, layer, head, query)


def lm_inside_for(model, tokenizer, text: str | list[int], layer: int, head: int, query: int) -> HeadInside:
    """:func:`inside_head` of a decoder-only model over ``text`` or its ids (causal self-attention)."""
    _check(model, "decoder_self", layer, head, ("decoder_self",))
    module = attention_module(model, "decoder_self", layer)
    return inside_head(module, lambda: lm_attention_for(model, tokenizer, text), "decoder_self", layer, head, query)
