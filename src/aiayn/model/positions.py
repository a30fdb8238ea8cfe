"""Positional information: sinusoidal (section 3.5), learned absolute, and rotary (RoPE).

Every module takes the positions of a (B, T) block as ``offset``: an int (row-independent, positions
``offset .. offset + T - 1``) or a (B,) tensor of per-row offsets (left-padded prompts start their real
tokens at position 0; their padding columns get negative positions, clamped to 0 and never attended).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_encoding(length: int, d_model: int, base: float = 10000.0, offset: int = 0,
                        device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(...), section 3.5.

    Returns a (length, d_model) tensor for positions ``offset .. offset + length - 1``; any length works.
    """
    pos = torch.arange(offset, offset + length, device=device, dtype=torch.float64)  # (L,)
    return sinusoidal_at(pos, d_model, base).to(dtype)


def sinusoidal_at(pos: Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """The same encodings for any tensor of positions: (...,) -> (..., d_model), in ``pos``'s float dtype."""
    pos = pos.double()[..., None]  # (..., 1)
    two_i = torch.arange(0, d_model, 2, device=pos.device, dtype=torch.float64)  # (ceil(D/2),)
    angle = pos / base ** (two_i / d_model)  # (..., ceil(D/2))
    pe = torch.zeros(*angle.shape[:-1], d_model, device=pos.device, dtype=torch.float64)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return pe


def position_ids(length: int, offset: int | Tensor, device: torch.device | None = None) -> Tensor:
    """Positions of a block of ``length`` columns: (length,) for an int offset, (B, length) for a (B,)
    tensor of per-row offsets (negative positions, i.e. left padding, are clamped to 0)."""
    if isinstance(offset, int):
        return torch.arange(offset, offset + length, device=device)  # (T,)
    return (offset[:, None] + torch.arange(length, device=offset.device)).clamp(min=0)  # (B, T)


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal encodings (no parameters), computed for any length. ``halves``: the same values with
    every sin first and every cos after (Marian's layout) instead of interleaved (the paper's)."""

    def __init__(self, d_model: int, base: float = 10000.0, halves: bool = False) -> None:
        super().__init__()
        self.d_model, self.base, self.halves = d_model, base, halves

    def forward(self, length: int, offset: int | Tensor = 0, like: Tensor | None = None) -> Tensor:
        """(length, d_model) encodings for positions offset.. ((B, length, d_model) for per-row offsets),
        on ``like``'s device and dtype."""
        device = None if like is None else like.device
        dtype = torch.float32 if like is None else like.dtype
        if isinstance(offset, int):
            pe = sinusoidal_encoding(length, self.d_model, self.base, offset, device, dtype)
        else:
            pe = sinusoidal_at(position_ids(length, offset, device), self.d_model, self.base).to(dtype)
        if self.halves:
            pe = torch.cat([pe[..., 0::2], pe[..., 1::2]], dim=-1)  # (..., D): sin of every pair, then cos
        return pe


class LearnedPositions(nn.Module):
    """A learned (max_len, d_model) table of absolute positions."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, length: int, offset: int | Tensor = 0, like: Tensor | None = None) -> Tensor:
        """(length, d_model) rows for positions offset.. ((B, length, d_model) for per-row offsets);
        longer than the table is a clear error."""
        last = offset + length if isinstance(offset, int) else int(offset.max()) + length
        if last > self.table.num_embeddings:
            raise ValueError(f"sequence of {last} positions is longer than max_len="
                             f"{self.table.num_embeddings} of the learned position table")
        if isinstance(offset, int):
            return self.table.weight[offset: offset + length]
        return self.table(position_ids(length, offset))  # (B, T, D)


def rope_frequencies(d_head: int, base: float = 10000.0, scaling: dict | None = None) -> Tensor:
    """theta_i = base^(-2i/d_head), i < d_head/2, in float32, after a scaling rule of long-context checkpoints:
    ``linear`` divides every frequency by ``factor`` (positions / factor); ``llama3`` divides only the low
    frequencies (wavelengths above original_max / low_freq_factor), keeps the high ones (wavelengths below
    original_max / high_freq_factor) and blends smoothly between; ``factors`` divides each frequency by its own
    number (what a GGUF file keeps as ``rope_freqs``)."""
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)  # (D/2,)
    if scaling is None:
        return inv_freq
    if scaling["type"] == "factors":
        return inv_freq / torch.tensor(scaling["factors"], dtype=torch.float32)
    factor = scaling["factor"]
    if scaling["type"] == "linear":
        return inv_freq / factor
    original = scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq  # (D/2,)
    smooth = ((original / wavelength - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves, 1: short ones
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return torch.where(wavelength < original / high, inv_freq,
                       torch.where(wavelength > original / low, inv_freq / factor, blended))


class RotaryEmbedding(nn.Module):
    """RoPE: rotate pairs of q and k dimensions by m * theta_i (m the position, theta_i from
    :func:`rope_frequencies`). Pairs are (2i, 2i+1) (``halves`` False, RoFormer) or (i, i + D/2) (``halves``
    True, LLaMA as Hugging Face lays it out); one layout is the other with the head's dimensions permuted."""

    def __init__(self, d_head: int, base: float = 10000.0, halves: bool = False, scaling: dict | None = None,
                 rotary_dim: int | None = None) -> None:
        """``rotary_dim``: only each head's first dimensions turn (partial rotary: Phi-3.5, Phi-4-mini), the rest pass
        unrotated; None = all ``d_head``."""
        super().__init__()
        self.rotary_dim = rotary_dim if rotary_dim is not None and rotary_dim < d_head else None
        self.register_buffer("inv_freq", rope_frequencies(self.rotary_dim or d_head, base, scaling), persistent=False)
        self.halves = halves
        self.tables: dict[tuple, tuple[Tensor, Tensor]] = {}  # (device, dtype) -> cos, sin (L, D/2): a cache

    def cos_sin(self, length: int, offset: int | Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
        """cos(m theta_i) and sin(m theta_i) for the block's positions m, in ``like``'s dtype: (T, D/2) each, or
        (B, 1, T, D/2) for per-row offsets. For an int offset, read from a table of positions 0..L-1 kept per
        device and dtype (built once, doubled when a longer position is asked: one lookup a layer instead of ten
        operators); per-row offsets are computed (sizing a table for them would wait on the device each layer)."""
        if not isinstance(offset, int):
            angle = position_ids(length, offset, like.device).float()[..., None] * self.inv_freq  # (B, T, D/2)
            return angle.cos().to(like.dtype)[:, None], angle.sin().to(like.dtype)[:, None]  # (B, 1, T, D/2)
        last = offset + length
        key = (like.device, like.dtype)
        if key not in self.tables or self.tables[key][0].size(0) < last:
            size = max(256, 1 << (last - 1).bit_length())
            angle = torch.arange(size, device=like.device).float()[:, None] * self.inv_freq.to(like.device)  # (L, D/2)
            self.tables[key] = (angle.cos().to(like.dtype), angle.sin().to(like.dtype))
        cos, sin = self.tables[key]
        return cos[offset:last], sin[offset:last]  # (T, D/2)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """Rotate x of shape (B, H, T, D) whose positions start at ``offset`` (an int or per row, (B,))."""
        if self.rotary_dim is not None:
            turned, passed = x.split([self.rotary_dim, x.size(-1) - self.rotary_dim], dim=-1)  # (B, H, T, R), rest
            return torch.cat((self._rotate(turned, offset), passed), dim=-1)  # (B, H, T, D)
        return self._rotate(x, offset)

    def _rotate(self, x: Tensor, offset: int | Tensor) -> Tensor:
        cos, sin = self.cos_sin(x.size(-2), offset, x)
        if self.halves:
            x0, x1 = x.chunk(2, dim=-1)  # (B, H, T, D/2) each: dimension i pairs with i + D/2
            return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # (B, H, T, D)
        pairs = x.unflatten(-1, (-1, 2))  # (B, H, T, D/2, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]  # (B, H, T, D/2) each
        rotated = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # (B, H, T, D/2, 2)
        return rotated.flatten(-2)  # (B, H, T, D)


def relative_buckets(relative: Tensor, bidirectional: bool, n_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bucket of each relative position (key position - query position), Raffel et al. 2020, section 2.1.

    Bidirectional (the encoder): half of the buckets for keys before the query, half for keys after it. Causal
    (the decoder): every bucket for keys at or before the query (later keys share bucket 0; the mask hides them).
    Within a direction, distances below half of its buckets get a bucket each; longer ones share buckets that
    grow logarithmically up to ``max_distance``, and everything farther shares the last. Same shape, int64.
    """
    if bidirectional:
        n_buckets //= 2
        offset = (relative > 0).long() * n_buckets  # keys after the query: the upper half
        distance = relative.abs()
    else:
        offset = torch.zeros_like(relative)
        distance = (-relative).clamp(min=0)  # how far back the key is
    exact = n_buckets // 2
    logarithmic = exact + (torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                           * (n_buckets - exact)).long()
    far = logarithmic.clamp(max=n_buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """T5's relative position bias: a learned scalar per (bucket, head) added to the attention logits.

    One table per stack, shared by all of its layers (``aiayn.model.layers.Encoder``/``Decoder`` compute the bias
    once per call and give it to every layer's self-attention). Query i of T sits at key column S - T + i (the new
    positions of a cached decoder come last), so only the two lengths are needed: relative positions are column
    differences, which left padding and dropped prefixes do not change.
    """

    def __init__(self, n_heads: int, n_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True) -> None:
        super().__init__()
        self.table = nn.Embedding(n_buckets, n_heads)
        self.n_buckets, self.max_distance, self.bidirectional = n_buckets, max_distance, bidirectional

    def forward(self, q_len: int, k_len: int) -> Tensor:
        """The bias (1, H, T, S) for T queries over S keys, in the table's dtype and device."""
        device = self.table.weight.device
        q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (T, 1)
        k_pos = torch.arange(k_len, device=device)[None, :]  # (1, S)
        buckets = relative_buckets(k_pos - q_pos, self.bidirectional, self.n_buckets, self.max_distance)  # (T, S)
        return self.table(buckets).permute(2, 0, 1)[None]  # (T, S, H) -> (1, H, T, S)
