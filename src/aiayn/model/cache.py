"""A decoder's caches for incremental decoding (generation): each layer's self-attention KV cache
(``model/kv_cache.py``) and, for an encoder-decoder, its cross-attention keys and values.

The model reads and fills them; decoding code (``aiayn.decoding``) creates them and reorders them for beams.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.model.kv_cache import ROLLBACK, KVCache, LayerKV, runs_of


@dataclass
class LayerCache:
    """What one decoder layer keeps between steps: its self-attention KV cache and, for an
    encoder-decoder, the cross-attention keys/values of the memory (computed once per source)."""

    self_kv: LayerKV
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
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
                 windows: list[int | None] | None = None) -> DecoderCache:
        """``windows``: each layer's sliding window (its cache a ring: :class:`KVCache`), or None for all full."""
        windows = windows or [None] * n_layers
        return cls([LayerCache(KVCache(batch, n_heads, max_len, d_head, device, dtype, window))
                    for window in windows])

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

    def room(self) -> int:
        """Positions a pass may still add and take back: a full layer's free slots, a ring's ``ROLLBACK``."""
        return min((kv.capacity - kv.length if kv.window is None else ROLLBACK
                    for kv in (layer.self_kv for layer in self.layers)), default=ROLLBACK)

    def mark_padding(self, left_pad: Tensor | None) -> None:
        """Rows padded in front by ``left_pad`` (B,) (None: none): each full layer's attention takes the runs of
        rows with like padding apart, from their first real column (:func:`runs_of`); rings attend whole."""
        runs = None if left_pad is None else runs_of(left_pad.tolist())
        for layer in self.layers:
            layer.self_kv.attend_apart(runs)

    @classmethod
    def assemble(cls, parts: list[tuple[DecoderCache, Tensor | None, int]], capacity: int,
                 starts: list[int] | None = None) -> DecoderCache:
        """Continuous batching (``aiayn.decoding.engine``): rows of several caches in one, see
        :meth:`KVCache.assemble` (``starts``: each row's first real column); cross-attention keys/values of
        sources of different lengths are zero-padded to the longest (the source mask hides them)."""
        layers = []
        for i in range(len(parts[0][0].layers)):
            self_kv = KVCache.assemble([(c.layers[i].self_kv, index, shift) for c, index, shift in parts], capacity,
                                       starts)
            crosses = [(c.layers[i].cross_kv, index) for c, index, _ in parts]
            layers.append(LayerCache(self_kv, _cross(crosses)))
        return cls(layers)


def _cross(parts: list[tuple[tuple[Tensor, Tensor] | None, Tensor | None]]) -> tuple[Tensor, Tensor] | None:
    """Cross-attention keys and values (B, H, S, D) of each part's rows ``index``, one after the other, padded
    to one S."""
    if any(kv is None for kv, _ in parts):
        if not all(kv is None for kv, _ in parts):
            raise ValueError("KV cache: rows with and without cross-attention keys cannot share a batch")
        return None
    s = max(kv[0].size(2) for kv, _ in parts)
    pick = lambda t, index: t if index is None else t.index_select(0, index)  # noqa: E731
    return tuple(torch.cat([pad_to(pick(kv[j], index), s, 2) for kv, index in parts]) for j in range(2))


def pad_to(t: Tensor, size: int, dim: int, value: float | bool = 0) -> Tensor:
    """``t`` padded at the end of ``dim`` with ``value`` to ``size`` (unchanged when it has that size)."""
    if t.size(dim) == size:
        return t
    shape = list(t.shape)
    shape[dim] = size - t.size(dim)
    return torch.cat([t, t.new_full(shape, value)], dim=dim)
