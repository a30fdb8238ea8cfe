"""A standalone, preallocated KV cache for incremental decoding (section 3 of SPEC: generation).

The model reads and fills it; decoding code (``aiayn.decoding``) creates it and reorders it for beams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


class KVCache:
    """Keys and values of past positions for one self-attention layer, preallocated to ``max_len``.

    Shape: k and v are (B, H, max_len, D); the first ``length`` positions are filled.
    """

    def __init__(self, batch: int, n_heads: int, max_len: int, d_head: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        self.k = torch.zeros(batch, n_heads, max_len, d_head, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H, T, D) keys/values; return all filled ones, (B, H, length, D)."""
        end = self.length + k.size(2)
        if end > self.k.size(2):
            raise ValueError(f"KV cache full: {end} positions asked, {self.k.size(2)} preallocated")
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the batch (beam search), in that order; ``index`` has the batch's size.

        Only the filled positions are moved: the preallocated rest is never read before it is written.
        """
        n = self.length
        self.k[:, :, :n] = self.k[:, :, :n].index_select(0, index)
        self.v[:, :, :n] = self.v[:, :, :n].index_select(0, index)

    def truncate(self, length: int) -> None:
        """Forget positions from ``length`` on (speculative decoding rolls rejected tokens back)."""
        self.length = min(self.length, length)

    @classmethod
    def holding(cls, k: Tensor, v: Tensor, length: int) -> KVCache:
        """A cache around existing (B, H, max_len, D) tensors whose first ``length`` positions are filled."""
        cache = cls.__new__(cls)
        cache.k, cache.v, cache.length = k, v, length
        return cache

    def select(self, index: Tensor) -> KVCache:
        """A new cache of rows ``index`` only (any number of rows); only the filled positions are copied."""
        n = self.length
        return self._filled_with(self.k[:, :, :n].index_select(0, index), self.v[:, :, :n].index_select(0, index))

    def append_rows(self, other: KVCache) -> KVCache:
        """A new cache of this cache's rows followed by ``other``'s (same capacity and filled length)."""
        if self.length != other.length:
            raise ValueError(f"KV cache: rows of {self.length} and {other.length} positions cannot share a batch")
        n = self.length
        return self._filled_with(torch.cat([self.k[:, :, :n], other.k[:, :, :n]]),
                                 torch.cat([self.v[:, :, :n], other.v[:, :, :n]]))

    def _filled_with(self, k: Tensor, v: Tensor) -> KVCache:
        """A cache of this one's capacity whose filled positions are k, v (B', H, length, D); the rest is
        zeros, never uninitialised memory (a masked key still multiplies its value by 0, and 0 * NaN is NaN)."""
        shape = (k.size(0), k.size(1), self.k.size(2), k.size(3))  # (B', H, max_len, D)
        big_k, big_v = self.k.new_zeros(shape), self.v.new_zeros(shape)
        big_k[:, :, : self.length], big_v[:, :, : self.length] = k, v
        return KVCache.holding(big_k, big_v, self.length)

    def copy_prefix(self, other: KVCache, length: int) -> None:
        """Fill the first ``length`` positions from ``other`` (prompt caching)."""
        self.k[:, :, :length] = other.k[:, :, :length]
        self.v[:, :, :length] = other.v[:, :, :length]
        self.length = length


@dataclass
class LayerCache:
    """What one decoder layer keeps between steps: its self-attention KV cache and, for an
    encoder-decoder, the cross-attention keys/values of the memory (computed once per source)."""

    self_kv: KVCache
    cross_kv: tuple[Tensor, Tensor] | None = None

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """``within_groups``: rows only move among rows of the same source, so cross keys/values stay."""
        self.self_kv.reorder(index)
        if self.cross_kv is not None and not within_groups:
            self.cross_kv = tuple(t.index_select(0, index) for t in self.cross_kv)


@dataclass
class DecoderCache:
    """Per-layer caches of a decoder stack; ``position`` is the number of positions already decoded."""

    layers: list[LayerCache] = field(default_factory=list)

    @classmethod
    def allocate(cls, n_layers: int, batch: int, n_heads: int, max_len: int, d_head: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> DecoderCache:
        return cls([LayerCache(KVCache(batch, n_heads, max_len, d_head, device, dtype))
                    for _ in range(n_layers)])

    @property
    def position(self) -> int:
        return self.layers[0].self_kv.length if self.layers else 0

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """Reorder every layer's batch rows (beam search keeps, drops and copies hypotheses).

        ``within_groups``: each row moves only among the rows of its own source sentence (the beams of
        one sentence), whose cross-attention keys/values are equal, so those need no copy.
        """
        for layer in self.layers:
            layer.reorder(index, within_groups)

    def truncate(self, length: int) -> None:
        for layer in self.layers:
            layer.self_kv.truncate(length)

    # Continuous batching (aiayn.decoding.engine): rows join, leave, and share columns.

    def select(self, index: Tensor) -> DecoderCache:
        """A cache of rows ``index`` only (any number of rows), the same filled length."""
        return DecoderCache([LayerCache(layer.self_kv.select(index), None if layer.cross_kv is None else
                                        tuple(t.index_select(0, index) for t in layer.cross_kv))
                             for layer in self.layers])

    def append_rows(self, other: DecoderCache) -> DecoderCache:
        """This cache's rows followed by ``other``'s (same layers and filled length); cross-attention keys and
        values of sources of different lengths are zero-padded to the longer (the source mask hides them)."""
        return DecoderCache([LayerCache(mine.self_kv.append_rows(theirs.self_kv), _cat_cross(mine, theirs))
                             for mine, theirs in zip(self.layers, other.layers, strict=True)])

    def shift(self, columns: int) -> None:
        """Move the filled positions ``columns`` to the right (> 0: new empty columns in front, for a
        longer prompt to join) or to the left (< 0: drop columns of padding every row has)."""
        for layer in self.layers:
            kv = layer.self_kv
            n, new = kv.length, kv.length + columns
            if new > kv.k.size(2) or new < 0:
                raise ValueError(f"KV cache: cannot shift {n} positions by {columns} in {kv.k.size(2)}")
            start = max(0, -columns)
            for t in (kv.k, kv.v):
                t[:, :, start + columns: n + columns] = t[:, :, start:n].clone()
                if columns > 0:  # the new front columns are padding: zeros, whatever was there (0 * NaN is NaN)
                    t[:, :, :columns] = 0
            kv.length = new


    def copy_prefix(self, other: DecoderCache, length: int) -> None:
        """Take the first ``length`` self-attention positions of ``other`` (same layers and heads)."""
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            mine.self_kv.copy_prefix(theirs.self_kv, length)


def _cat_cross(mine: LayerCache, theirs: LayerCache) -> tuple[Tensor, Tensor] | None:
    """Both layers' cross-attention keys/values (B, H, S, D), one after the other, padded to one S."""
    if (mine.cross_kv is None) != (theirs.cross_kv is None):
        raise ValueError("KV cache: rows with and without cross-attention keys cannot share a batch")
    if mine.cross_kv is None:
        return None
    s = max(mine.cross_kv[0].size(2), theirs.cross_kv[0].size(2))
    return tuple(torch.cat([pad_to(a, s, 2), pad_to(b, s, 2)])
                 for a, b in zip(mine.cross_kv, theirs.cross_kv, strict=True))


def pad_to(t: Tensor, size: int, dim: int, value: float | bool = 0) -> Tensor:
    """``t`` padded at the end of ``dim`` with ``value`` to ``size`` (unchanged when it has that size)."""
    if t.size(dim) == size:
        return t
    shape = list(t.shape)
    shape[dim] = size - t.size(dim)
    return torch.cat([t, t.new_full(shape, value)], dim=dim)


@dataclass
class DecodeState:
    """What a model keeps between decoding steps for B rows (``TransformerModel.start`` / ``.step``).

    Attributes:
        cache: the decoder's KV cache, or None to recompute every position at each step.
        memory: (B, S, D) encoder output (encoder-decoder only); src_mask: (B, S) bool, True = real
            source token, None when no source has padding.
        left_pad: (B,) padding columns in front of each row's prompt (decoder-only prompts of different
            lengths are left-aligned by padding); None when every row starts at column 0.
        output: the output projection for this decode, (..., D) -> (..., C): the rows of a vocabulary
            shortlist's C candidates (``aiayn.inference.shortlist``); None = the model's own, over all V tokens.
    """

    cache: DecoderCache | None
    memory: Tensor | None = None
    src_mask: Tensor | None = None
    left_pad: Tensor | None = None
    output: Callable[[Tensor], Tensor] | None = None

    @property
    def position(self) -> int:
        """Columns already in the cache (0 without a cache: every step feeds all columns)."""
        return 0 if self.cache is None else self.cache.position

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """Keep rows ``index`` (beam search). ``within_groups``: rows move only among the beams of their
        own input, which share one source and one padding, so those need no copy."""
        if not within_groups:
            self.memory, self.src_mask, self.left_pad = (
                None if t is None else t.index_select(0, index) for t in (self.memory, self.src_mask, self.left_pad))
        if self.cache is not None:
            self.cache.reorder(index, within_groups)

    # Continuous batching (aiayn.decoding.engine): rows join and leave between steps.

    def select(self, index: Tensor) -> DecodeState:
        """The state of rows ``index`` only (any number of rows)."""
        pick = lambda t: None if t is None else t.index_select(0, index)  # noqa: E731
        return DecodeState(self.cache.select(index), pick(self.memory), pick(self.src_mask), pick(self.left_pad),
                           self.output)

    def append_rows(self, other: DecodeState) -> DecodeState:
        """This state's rows followed by ``other``'s; both caches hold the same columns (see :meth:`shift`).
        Sources of different lengths are padded to the longer one (masked: the source mask is False there)."""
        memory = src_mask = None
        if self.memory is not None:
            s = max(self.memory.size(1), other.memory.size(1))
            memory = torch.cat([pad_to(self.memory, s, 1), pad_to(other.memory, s, 1)])  # (B1+B2, S, D)
            if self.src_mask is not None or other.src_mask is not None or self.memory.size(1) != s \
                    or other.memory.size(1) != s:
                src_mask = torch.cat([pad_to(_real(self), s, 1, False), pad_to(_real(other), s, 1, False)])
        left_pad = None
        if self.left_pad is not None or other.left_pad is not None:
            left_pad = torch.cat([_left_pad(self), _left_pad(other)])  # (B1+B2,)
        return DecodeState(self.cache.append_rows(other.cache), memory, src_mask, left_pad, self.output)

    def shift(self, columns: int) -> None:
        """``columns`` more (> 0) or fewer (< 0) padding columns in front of every row, in the cache too."""
        self.left_pad = _left_pad(self) + columns
        self.cache.shift(columns)

    @property
    def rows(self) -> int:
        return self.cache.layers[0].self_kv.k.size(0)


def _real(state: DecodeState) -> Tensor:
    """(B, S) bool, True = a real source token: the state's source mask, or all True without one."""
    if state.src_mask is not None:
        return state.src_mask
    return torch.ones(state.memory.shape[:2], dtype=torch.bool, device=state.memory.device)


def _left_pad(state: DecodeState) -> Tensor:
    """(B,) padding columns in front of each row (zeros when the state has none)."""
    if state.left_pad is not None:
        return state.left_pad
    return torch.zeros(state.rows, dtype=torch.long, device=state.cache.layers[0].self_kv.k.device)
