"""Scaled dot-product attention (section 3.2.1) and multi-head attention (section 3.2.2).

Masks are bool, True = may attend, broadcastable to (B, H, T, S). A query row with no key it may attend
to (a fully masked row) gives an output of zeros, never NaN.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.kv_cache import LayerKV
from aiayn.model.kv_int8 import Int8Rows, int8_attention
from aiayn.model.packed import stack_linears
from aiayn.model.positions import RotaryEmbedding


class Segment(NamedTuple):
    """One batch of a pass over several (:meth:`MultiHeadAttention.forward_segments`): ``rows`` x ``columns``
    new positions, their self-attention ``mask`` (bool, True = may attend, (rows or 1, 1, columns, keys) or
    None), its KV ``cache`` and the rotary ``offset`` of its first column (an int, or (rows,) per row)."""

    rows: int
    columns: int
    mask: Tensor | None
    cache: LayerKV
    offset: int | Tensor


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """The scaled scores of equation (1): Q K^T / sqrt(d_k). q (..., T, D), k (..., S, D) -> (..., T, S)."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def reference_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                        bias: Tensor | None = None, softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """Equation (1) written out: softmax(Q K^T / sqrt(d_k) + bias) V, masked scores set to -inf.

    Args:
        q: (..., T, D) queries; k: (..., S, D) keys; v: (..., S, Dv) values.
        mask: bool, True = may attend, broadcastable to (..., T, S); None = attend everywhere.
        bias: float, added to the scores (T5's relative positions), broadcastable to (..., T, S); None = none.
        softcap: the scores squashed into (-cap, cap) as cap * tanh(scores / cap) (Gemma 2); None = none.
    Returns:
        output (..., T, Dv) and the attention weights (..., T, S); fully masked rows are all zeros.
    """
    scores = attention_scores(q, k)  # (..., T, S)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias
    if mask is None:
        return (weights := scores.softmax(dim=-1)) @ v, weights
    live = mask.any(dim=-1, keepdim=True)  # (..., T, 1): rows with at least one visible key
    scores = scores.masked_fill(~(mask | ~live), float("-inf"))
    weights = scores.softmax(dim=-1) * live  # fully masked rows -> 0
    return weights @ v, weights


def fast_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                   dropout_p: float = 0.0, bias: Tensor | None = None) -> Tensor:
    """The same as :func:`reference_attention` (output only) through ``F.scaled_dot_product_attention``.

    ``dropout_p`` drops attention weights (training only). Fully masked rows give zeros. k and v may have
    fewer heads than q (grouped-query attention: q (B, H, T, D), k and v (B, H_kv, S, D), H_kv divides H).
    ``bias``: float scores added before the softmax (SDPA's float mask), masked keys then set to -inf.
    """
    gqa = q.size(1) != k.size(1)
    bias = None if bias is None else bias.to(q.dtype)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, enable_gqa=gqa)
    live = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    attend = mask | ~live  # a fully masked row attends everywhere, then is zeroed
    if bias is not None:
        attend = torch.where(attend, bias, float("-inf"))  # (B, H, T, S) float
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=dropout_p, enable_gqa=gqa)
    return out * live


def merged_attention(q: Tensor, parts: list[tuple[Tensor, Tensor, Tensor | None]]) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V over keys and values that lie in several tensors, one part (k, v, mask) after
    another, without joining them: each part's attention and the log of its softmax's denominator, the parts
    weighted by their share of the whole denominator (cascade attention, as FlashInfer and vLLM read a shared
    prefix). q (B, H, T, D); each k, v (B, H_kv, S_i, D), mask bool (True = may attend) or None; every query must
    see a key in some part. Returns (B, H, T, D)."""
    outs, lses = zip(*(_attention_lse(q, k, v, mask) for k, v, mask in parts), strict=True)
    shares = torch.stack(lses).softmax(dim=0)  # (P, B, H, T): each part's share of the whole softmax
    return sum(share[..., None].to(out.dtype) * out.nan_to_num() for share, out in zip(shares, outs, strict=True))


def _attention_lse(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Attention of q over one part and the log-sum-exp of its scaled scores (B, H, T), at least float32 (-inf:
    none seen): PyTorch's CPU flash kernel, which returns it; elsewhere equation (1) written out."""
    additive = None if mask is None else torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
        ~mask, float("-inf"))
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=additive)
    groups, dtype = q.size(1) // k.size(1), torch.promote_types(q.dtype, torch.float32)
    scores = attention_scores(q.to(dtype), repeat_kv(k, groups).to(dtype))  # (B, H, T, S)
    scores = scores if additive is None else scores + additive.to(dtype)
    lse = scores.logsumexp(dim=-1)  # (B, H, T)
    return ((scores - lse[..., None]).exp() @ repeat_kv(v, groups).to(dtype)).to(q.dtype), lse


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """Each key/value head repeated for the ``groups`` query heads that share it: (B, H_kv, S, D) ->
    (B, H_kv * groups, S, D), query head h reading key/value head h // groups."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)  # (B, H, S, D)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (section 3.2.2), one projection per Q, K, V.

    Args:
        d_model: model width; n_heads: h, with d_model % h == 0 unless ``d_head`` is given.
        dropout: dropout on the attention weights.
        rope: a rotary embedding applied to q and k (self-attention only), or None.
        n_kv_heads: key/value heads (grouped-query attention: each serves n_heads / n_kv_heads query heads;
            1 = multi-query); None = n_heads, the paper's.
        d_head: size of each head; None = d_model / n_heads.
        qkv_bias, out_bias: biases on the Q/K/V projections and on W^O (the paper: both).
        scaled: scores divided by sqrt(d_k) (equation 1); False: plain dot products (section 3.2.1's ablation:
            the queries are multiplied by sqrt(d_k), which cancels the division on both paths).
        q_norm, k_norm: norms over each head's queries and keys (size d_head), before the rotary embedding (Qwen3's
            q/k normalisation); None = none (the paper).
        query_scale: the scores divided by sqrt(query_scale) instead of sqrt(d_k) (Gemma 2's
            ``query_pre_attn_scalar``); softcap: the scores capped as cap * tanh(scores / cap) before the softmax
            (Gemma 2; computed on the reference path, which SDPA has no such step for).
    """

    def __init__(self, d_model: int = 512, n_heads: int = 8, dropout: float = 0.0,
                 rope: RotaryEmbedding | None = None, *, n_kv_heads: int | None = None, d_head: int | None = None,
                 qkv_bias: bool = True, out_bias: bool = True, scaled: bool = True, q_norm: nn.Module | None = None,
                 k_norm: nn.Module | None = None, query_scale: float | None = None,
                 softcap: float | None = None) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head or d_model // n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        if n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads: {self.n_kv_heads} does not divide n_heads={n_heads}")
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=qkv_bias)
        self.out_proj = nn.Linear(n_heads * self.d_head, d_model, bias=out_bias)
        self.dropout, self.rope = dropout, rope
        if (q_norm is None) != (k_norm is None):
            raise ValueError("q_norm and k_norm: give both (q/k normalisation) or neither")
        self.q_norm, self.k_norm = q_norm, k_norm
        self.unscale = 1.0 if scaled else math.sqrt(self.d_head)
        if query_scale is not None:  # q k / sqrt(query_scale) = (q * sqrt(d_k / query_scale)) k / sqrt(d_k)
            self.unscale *= math.sqrt(self.d_head / query_scale)
        self.softcap = softcap
        self.qkv_proj: nn.Module | None = None  # set by fuse(): Q, K and V in one product (inference)

    def fuse(self) -> None:
        """Q, K and V of self-attention in one projection, W_q, W_k, W_v stacked row-wise (inference copies:
        one matrix-vector product a step where there were three). The three are removed; the results are
        equal to rounding. Only for self-attention: cross-attention projects keys from another sequence."""
        self.qkv_proj = stack_linears(self.q_proj, self.k_proj, self.v_proj)  # (H*D + 2*H_kv*D, d_model)
        self.q_proj = self.k_proj = self.v_proj = None

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, H*D) -> (B, H, T, D), for any number of heads H (queries' or keys')."""
        b, t, _ = x.shape
        return x.view(b, t, -1, self.d_head).transpose(1, 2)  # (B, H, T, D)

    def project_kv(self, key_value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (their norm applied, with q/k normalisation) and values of a sequence, split into heads: two
        (B, H_kv, S, D) tensors."""
        k = self.split_heads(self.k_proj(key_value))  # (B, H_kv, S, D)
        return (k if self.k_norm is None else self.k_norm(k)), self.split_heads(self.v_proj(key_value))

    def heads(self, query: Tensor, key_value: Tensor | None, static_kv: tuple[Tensor, Tensor] | None = None,
              offset: int | Tensor = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Q (B, H, T, D), K and V (B, H_kv, S, D), projected and split into heads, rotary positions applied."""
        if self.qkv_proj is not None:
            return self._fused_heads(query, offset)
        q = self.split_heads(self.q_proj(query))  # (B, H, T, D)
        q = q if self.q_norm is None else self.q_norm(q)
        k, v = static_kv if static_kv is not None else self.project_kv(key_value)
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        return (q if self.unscale == 1.0 else q * self.unscale), k, v

    def _fused_heads(self, x: Tensor, offset: int | Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`heads` of self-attention through the fused projection: the query and key heads rotated together."""
        return self._split_qkv(self.qkv_proj(x), offset)

    def _split_qkv(self, qkv: Tensor, offset: int | Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Projected queries, keys and values side by side (B, T, (H + 2 H_kv) D) -> Q (B, H, T, D), K and V
        (B, H_kv, T, D), normed and rotated as :meth:`heads` does."""
        qk, v = qkv.split([(self.n_heads + self.n_kv_heads) * self.d_head, self.n_kv_heads * self.d_head], dim=-1)
        qk = self.split_heads(qk)  # (B, H + H_kv, T, D)
        if self.q_norm is not None:
            q, k = qk.split([self.n_heads, self.n_kv_heads], dim=1)  # (B, H, T, D), (B, H_kv, T, D)
            qk = torch.cat([self.q_norm(q), self.k_norm(k)], dim=1)  # (B, H + H_kv, T, D)
        if self.rope is not None:
            qk = self.rope(qk, offset)
        q, k = qk.split([self.n_heads, self.n_kv_heads], dim=1)  # (B, H, T, D), (B, H_kv, T, D)
        return (q if self.unscale == 1.0 else q * self.unscale), k, self.split_heads(v)

    def forward(self, query: Tensor, key_value: Tensor | None, mask: Tensor | None = None, *,
                cache: LayerKV | None = None, static_kv: tuple[Tensor, Tensor] | None = None,
                offset: int | Tensor = 0, need_weights: bool = False,
                bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key_value``.

        Args:
            query: (B, T, d_model). key_value: (B, S, d_model); ignored when ``static_kv`` is given.
            mask: bool, True = may attend, broadcastable to (B, H, T, S_total).
            cache: a self-attention KV cache; new keys/values are appended and all of them attended.
            static_kv: keys/values computed once (cross-attention over the encoder memory).
            offset: absolute position of the first query (rotary positions with a cache); (B,) per row.
            need_weights: also return the per-head weights (B, H, T, S) through the reference path.
            bias: float (1 or B, H, T, S_total) added to the scores (T5's relative position bias), or None.
        Returns:
            output (B, T, d_model) and the weights or None.
        """
        q, k, v = self.heads(query, key_value, static_kv, offset)
        out, weights = self._attend_cached(q, k, v, mask, cache, bias, need_weights)
        out = out.transpose(1, 2).flatten(2)  # (B, T, H*D)
        return self.out_proj(out), weights

    def forward_segments(self, query: Tensor, segments: list[Segment]) -> Tensor:
        """Self-attention of several batches in one pass: each of ``segments`` is a batch of rows whose new
        positions lie one after the other in ``query`` (1, N, d_model) (row-major, N the sum of rows x columns),
        attending only to its own cache under its own mask; the projections run once over all N positions
        (a long prompt's chunk computed inside the running rows' step: vLLM's mixed batches). Returns (1, N,
        d_model), equal to each segment's :meth:`forward` with its cache."""
        if self.qkv_proj is not None:
            qkv = self.qkv_proj(query)  # (1, N, (H + 2 H_kv) D)
        else:
            qkv = torch.cat([self.q_proj(query), self.k_proj(query), self.v_proj(query)], dim=-1)
        outs, start = [], 0
        for seg in segments:
            n = seg.rows * seg.columns
            q, k, v = self._split_qkv(qkv[:, start:start + n].view(seg.rows, seg.columns, -1), seg.offset)
            out, _ = self._attend_cached(q, k, v, seg.mask, seg.cache, None, False)  # (b, H, t, D)
            outs.append(out.transpose(1, 2).reshape(1, n, -1))  # (1, b*t, H*D)
            start += n
        return self.out_proj(torch.cat(outs, dim=1))

    def _attend_cached(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, cache: LayerKV | None,
                       bias: Tensor | None, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """The new keys/values appended to ``cache`` (if any) and every one attended: the output (B, H, T, D)
        and the weights when asked (mask bool, True = may attend)."""
        runs = None
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H_kv, S_total, D): the cache holds key/value heads only
            mask = cache.visible(mask)  # a sliding layer's ring returns only the positions it holds
            runs = None if need_weights else cache.runs
            if cache.shared:  # positions read where a prompt cache keeps them, then the cache's own
                return self._attend_shared(q, [*cache.shared, (k, v)], mask, bias, need_weights)
        if runs is None:
            return self.attend(q, k, v, mask, bias, need_weights)
        # rows padded in front attended apart, from their first real column: the padding is never read
        return torch.cat([self.attend(q[a:b], k[a:b, :, s:], v[a:b, :, s:], _rows(mask, a, b, s),
                                      _rows(bias, a, b, s), False)[0] for a, b, s in runs]), None

    def _attend_shared(self, q: Tensor, parts: list[tuple[Tensor, Tensor]], mask: Tensor | None,
                       bias: Tensor | None, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Attention over keys/values (1, H_kv, s_i, D) that lie in ``parts``, one after another: a part at a time,
        merged (:func:`merged_attention`: no copy of a shared prefix), or joined for the weights' paths."""
        if need_weights or self.softcap is not None or bias is not None:
            k, v = (torch.cat([part[j] for part in parts], dim=2) for j in range(2))  # (1, H_kv, S, D)
            return self.attend(q, k, v, mask, bias, need_weights)
        ends = itertools.accumulate(k.size(2) for k, _ in parts)
        return merged_attention(q, [(k, v, None if mask is None else mask[..., end - k.size(2):end])
                                    for (k, v), end in zip(parts, ends, strict=True)]), None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """softmax(Q K^T / sqrt(d_k)) V of heads (B, H, T, D) over keys and values (B, H_kv, S, D), mask bool
        (True = may attend): the output (B, H, T, D) and, with ``need_weights``, the weights (B, H, T, S). Keys and
        values may be an int8 cache's rows (``model/kv_int8.py``): read as they lie, or dequantized for the weights."""
        if isinstance(k, Int8Rows):  # the int8 KV cache's rows (model/kv_int8.py)
            if not (need_weights or self.softcap is not None or bias is not None) and (
                    out := int8_attention(q, k, v, mask)) is not None:
                return out, None
            k, v = k.dequantize(q.dtype), v.dequantize(q.dtype)  # the reference: the rows written out as floats
        if need_weights or self.softcap is not None:
            groups = self.n_heads // self.n_kv_heads
            out, weights = reference_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), mask, bias,
                                               self.softcap)
            return out, (weights if need_weights else None)
        return fast_attention(q, k, v, mask, self.dropout if self.training else 0.0, bias), None


def _rows(t: Tensor | None, first: int, end: int, column: int) -> Tensor | None:
    """A mask or bias (B or 1, .., S) cut to rows first..end-1 and keys from ``column`` on."""
    if t is None:
        return None
    return (t if t.size(0) == 1 else t[first:end])[..., column:]
