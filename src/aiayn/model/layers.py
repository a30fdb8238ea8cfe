"""The encoder and decoder layers of Figure 1, and their N-layer stacks (section 3.1).

Masks are bool, True = may attend. Shapes: x (B, T, d_model), memory (B, S, d_model).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.attention import MultiHeadAttention, Segment
from aiayn.model.cache import DecoderCache, LayerCache
from aiayn.model.dropout import Dropout
from aiayn.model.packed import stack_linears
from aiayn.model.positions import RelativePositionBias

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh"), "silu": F.silu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, equation (2); GELU or SiLU optional. d_model -> d_ff -> d_model."""

    def __init__(self, d_model: int = 512, d_ff: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class SwiGLUFeedForward(nn.Module):
    """FFN_SwiGLU(x) = W_down(SiLU(x W_gate) * x W_up) (Shazeer 2020, "GLU Variants"; LLaMA's MLP), no biases
    by default. d_model -> d_ff (twice: gate and up) -> d_model."""

    def __init__(self, d_model: int = 512, d_ff: int = 2048, dropout: float = 0.0,
                 activation: str = "silu", bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATIONS[activation]
        self.gate_up_proj: nn.Module | None = None  # set by fuse(): gate and up in one product (inference)

    def fuse(self) -> None:
        """W_gate and W_up stacked into one projection (inference copies: one matrix-vector product where there
        were two); the two are removed, the results equal to rounding."""
        self.gate_up_proj = stack_linears(self.gate_proj, self.up_proj)  # (2 * d_ff, d_model)
        self.gate_proj = self.up_proj = None

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # (..., d_ff) each
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.dropout(self.activation(gate) * up))


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019; LLaMA): no mean subtracted, no bias.
    Computed in float32 and cast back before the gain, as the LLaMA reference does. (..., D) -> (..., D)."""

    def __init__(self, d_model: int = 512, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)  # the same, in one call
        normed = F.rms_norm(x.float(), (x.size(-1),), eps=self.eps).to(x.dtype)
        return self.weight * normed


def make_norm(norm_type: str, d_model: int, eps: float) -> nn.Module:
    """The normalisation layer a config names: ``layernorm`` (the paper) or ``rmsnorm`` (LLaMA)."""
    return RMSNorm(d_model, eps) if norm_type == "rmsnorm" else nn.LayerNorm(d_model, eps=eps)


class Residual(nn.Module):
    """Residual connection + LayerNorm around a sublayer (section 3.1, 5.4).

    post-norm (the paper's figure): LayerNorm(x + Dropout(Sublayer(x)));
    pre-norm (the paper's released code, modern LLMs): x + Dropout(Sublayer(LayerNorm(x)));
    ``post_norm`` with pre-norm (Gemma 2 and 3's "sandwich"): x + Dropout(Norm'(Sublayer(Norm(x)))).
    ``norm_type`` rmsnorm puts an RMSNorm where the LayerNorm is.
    """

    def __init__(self, d_model: int = 512, dropout: float = 0.1, norm_first: bool = False,
                 eps: float = 1e-5, norm_type: str = "layernorm", post_norm: bool = False) -> None:
        super().__init__()
        self.norm = make_norm(norm_type, d_model, eps)
        self.post_norm = make_norm(norm_type, d_model, eps) if post_norm else None
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.post_norm is not None:
            return x + self.dropout(self.post_norm(sublayer(self.norm(x))))
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention (no causal mask) + FFN, each in a residual block (Figure 1, left), built from its parts.

    Args:
        self_attn: the multi-head attention (``model/builders.py``: heads, GQA, biases, rotary positions).
        ffn: the position-wise feed-forward network (equation 2, or SwiGLU).
        res_attn, res_ffn: the residual block around each (its norm, dropout, post- or pre-norm).
    """

    def __init__(self, self_attn: MultiHeadAttention, ffn: nn.Module, res_attn: Residual, res_ffn: Residual) -> None:
        super().__init__()
        self.self_attn, self.ffn, self.res_attn, self.res_ffn = self_attn, ffn, res_attn, res_ffn

    @classmethod
    def paper(cls, d_model: int = 512, n_heads: int = 8, d_ff: int = 2048, dropout: float = 0.1,
              norm_first: bool = False) -> EncoderLayer:
        """The paper's layer of these sizes (section 3.1; ``norm_first``: pre-norm)."""
        return cls(MultiHeadAttention(d_model, n_heads, dropout), PositionwiseFeedForward(d_model, d_ff, dropout),
                   Residual(d_model, dropout, norm_first), Residual(d_model, dropout, norm_first))

    def forward(self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False,
                bias: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """x (B, S, D); mask broadcastable to (B, H, S, S); bias (1, H, S, S) added to the self-attention scores
        (T5's relative positions) or None. Returns x and {"self": (B, H, S, S)} if asked."""
        weights: dict[str, Tensor] = {}

        def attend(y: Tensor) -> Tensor:
            out, w = self.self_attn(y, y, mask, need_weights=need_weights, bias=bias)
            if w is not None:
                weights["self"] = w
            return out

        x = self.res_attn(x, attend)
        return self.res_ffn(x, self.ffn), weights


class DecoderLayer(nn.Module):
    """Causal self-attention + cross-attention over the memory + FFN (Figure 1, right), built from its parts.

    Args:
        self_attn, ffn, res_self, res_ffn: as :class:`EncoderLayer`'s (``res_self`` around the self-attention).
        cross_attn, res_cross: the attention over the encoder's memory and its residual block; None for the
            decoder-only (GPT-style) block.
        local: its self-attention keeps to the sliding window (the decoder hands it the window's mask; Gemma's
            sliding layers), where the other layers see every earlier token.
    """

    def __init__(self, self_attn: MultiHeadAttention, ffn: nn.Module, res_self: Residual, res_ffn: Residual,
                 cross_attn: MultiHeadAttention | None = None, res_cross: Residual | None = None,
                 local: bool = False) -> None:
        super().__init__()
        self.local = local
        if (cross_attn is None) != (res_cross is None):
            raise ValueError("cross_attn and res_cross: give both (an encoder-decoder's layer) or neither")
        self.self_attn, self.res_self, self.cross_attn, self.res_cross = self_attn, res_self, cross_attn, res_cross
        self.ffn, self.res_ffn = ffn, res_ffn

    @classmethod
    def paper(cls, d_model: int = 512, n_heads: int = 8, d_ff: int = 2048, dropout: float = 0.1,
              norm_first: bool = False, cross_attention: bool = True) -> DecoderLayer:
        """The paper's layer of these sizes (section 3.1; ``norm_first``: pre-norm; without ``cross_attention``,
        a language model's)."""
        cross = (MultiHeadAttention(d_model, n_heads, dropout), Residual(d_model, dropout, norm_first)) \
            if cross_attention else (None, None)
        return cls(MultiHeadAttention(d_model, n_heads, dropout), PositionwiseFeedForward(d_model, d_ff, dropout),
                   Residual(d_model, dropout, norm_first), Residual(d_model, dropout, norm_first), *cross)

    def forward(self, x: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                cross_mask: Tensor | None = None, cache: LayerCache | None = None, offset: int | Tensor = 0,
                need_weights: bool = False, bias: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """x (B, T, D), memory (B, S, D); self_mask (.., T, T_total), cross_mask (.., T, S); bias (1, H, T,
        T_total) added to the self-attention scores (T5's relative positions; cross-attention has none) or None.

        With a cache, x holds only the new positions (starting at ``offset``); past keys/values come
        from the cache and the memory's keys/values are computed once.
        """
        weights: dict[str, Tensor] = {}

        def self_attend(y: Tensor) -> Tensor:
            kv = None if cache is None else cache.self_kv
            out, w = self.self_attn(y, y, self_mask, cache=kv, offset=offset, need_weights=need_weights, bias=bias)
            if w is not None:
                weights["self"] = w
            return out

        def cross_attend(y: Tensor) -> Tensor:
            static = None
            if cache is not None:
                if cache.cross_kv is None:
                    cache.cross_kv = self.cross_attn.project_kv(memory)
                static = cache.cross_kv
            out, w = self.cross_attn(y, memory, cross_mask, static_kv=static, need_weights=need_weights)
            if w is not None:
                weights["cross"] = w
            return out

        x = self.res_self(x, self_attend)
        if self.cross_attn is not None:
            x = self.res_cross(x, cross_attend)
        return self.res_ffn(x, self.ffn), weights

    def forward_segments(self, x: Tensor, segments: list[Segment]) -> Tensor:
        """Several batches' new positions in one pass (x (1, N, D); see
        :meth:`MultiHeadAttention.forward_segments`): the norms, projections and FFN over all N, each segment's
        self-attention over its own cache. A decoder-only layer's (no cross-attention)."""
        x = self.res_self(x, lambda y: self.self_attn.forward_segments(y, segments))
        return self.res_ffn(x, self.ffn)


class Encoder(nn.Module):
    """N encoder layers; pre-norm adds a final LayerNorm; ``position_bias`` (T5's relative positions) is computed
    once per call and added in every layer's self-attention."""

    def __init__(self, layers: list[EncoderLayer], final_norm: nn.Module | None = None,
                 position_bias: RelativePositionBias | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = final_norm
        self.position_bias = position_bias

    def forward(self, x: Tensor, mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """x (B, S, D) -> (B, S, D), and per-layer attention weights when asked."""
        bias = None if self.position_bias is None else self.position_bias(x.size(1), x.size(1))  # (1, H, S, S)
        all_weights = []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights, bias)
            all_weights.append(w)
        return (self.norm(x) if self.norm is not None else x), all_weights


class Decoder(nn.Module):
    """N decoder layers; pre-norm adds a final LayerNorm; ``position_bias`` as in :class:`Encoder` (causal)."""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module | None = None,
                 position_bias: RelativePositionBias | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = final_norm
        self.position_bias = position_bias

    def forward(self, x: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                cross_mask: Tensor | None = None, cache: DecoderCache | None = None, offset: int | Tensor = 0,
                need_weights: bool = False, local_mask: Tensor | None = None) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """x (B, T, D) -> (B, T, D), and per-layer attention weights when asked; ``local_mask`` (as ``self_mask``,
        within the sliding window) is the self-attention mask of the layers that are ``local``."""
        bias = None
        if self.position_bias is not None:  # the T new queries come after the cache's positions
            t = x.size(1)
            bias = self.position_bias(t, t + (0 if cache is None else cache.position))  # (1, H, T, T_total)
        all_weights = []
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[i]
            mask = local_mask if layer.local else self_mask
            x, w = layer(x, memory, mask, cross_mask, layer_cache, offset, need_weights, bias)
            all_weights.append(w)
        return (self.norm(x) if self.norm is not None else x), all_weights

    def forward_segments(self, x: Tensor, parts: list[tuple[int, int, Tensor | None, Tensor | None, DecoderCache,
                                                            int | Tensor]]) -> Tensor:
        """x (1, N, D) -> (1, N, D): several batches' new positions, one after the other, in one pass. Each part
        is (rows, columns, self mask, local mask, its cache, its positions' offset), as :meth:`forward` takes
        them for a batch alone; a decoder-only stack without a position bias."""
        for i, layer in enumerate(self.layers):
            segments = [Segment(rows, columns, local if layer.local else mask, cache.layers[i].self_kv, offset)
                        for rows, columns, mask, local, cache, offset in parts]
            x = layer.forward_segments(x, segments)
        return self.norm(x) if self.norm is not None else x
