"""One self-attention layer's KV cache, preallocated, and the protocol a layer's attention asks of its cache.

The model reads and fills it; decoding code (``aiayn.decoding``) creates it (through ``model/cache.py``'s
``DecoderCache``) and reorders it for beams.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor

from aiayn.model.kv_int8 import Int8Rows, dense

ROLLBACK = 16  # positions a sliding layer's ring keeps beyond its window: speculative decoding takes back up to this
SLACK = 64  # padding columns before a row's first real one that an assembled cache keeps zero (see runs_of)


class LayerKV(Protocol):
    """What a layer's self-attention asks of its cache (``MultiHeadAttention._attend_cached``): the eager
    :class:`KVCache` and the compiled step's ``model/static.py::StaticKV`` both declare it."""

    runs: list[tuple[int, int, int]] | None  # rows attended apart, from their first real column (runs_of)
    shared: Sequence[tuple[Tensor, Tensor]]  # read-only keys/values of positions 0.. (a prompt cache's blocks)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H, T, D) keys/values; return every key/value the T new queries attend over."""

    def visible(self, mask: Tensor | None) -> Tensor | None:
        """``mask`` cut to the keys :meth:`update` returned last."""


class KVCache(LayerKV):
    """Keys and values of past positions for one self-attention layer, preallocated.

    Position p lives in slot p % capacity. Without a ``window`` the capacity is ``max_len`` and a position past it
    is refused. A sliding-window layer's cache (``window``: each query sees the latest ``window`` positions,
    itself included) is a ring of ``window + ROLLBACK`` slots at most: once full it overwrites its oldest
    positions, so its memory stays bounded however long the text (Mistral's rolling buffer cache).

    Shape: k and v are (B, H, capacity, D); ``length`` counts every position ever added (the ring holds the
    latest ``capacity`` of them). With ``dtype`` int8 they are :class:`~aiayn.model.kv_int8.Int8Rows` (the int8
    KV cache: what is written is quantized, what :meth:`update` returns is read by ``kv_int8.int8_attention``).
    """

    def __init__(self, batch: int, n_heads: int, max_len: int, d_head: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
                 window: int | None = None) -> None:
        capacity = max_len if window is None else min(max_len, window + ROLLBACK)
        # a full layer's slots are not zeroed (the eager step reads only written ones; the static step zeroes the
        # rest first: zero_unwritten); a small ring is zeros, as a wrapped one is attended whole
        new = torch.empty if window is None else torch.zeros
        shape = (batch, n_heads, capacity, d_head)
        self.k, self.v = ((Int8Rows.allocate(shape, device, window is not None) if dtype == torch.int8
                           else new(shape, device=device, dtype=dtype)) for _ in range(2))
        self.length, self.window, self.zeroed = 0, window, window is not None
        self.first = 0  # the oldest position still held (0 until a ring wraps)
        self.columns: Tensor | slice | None = None  # the absolute columns of the keys update() returned last
        self.runs: list[tuple[int, int, int]] | None = None  # rows attended apart (DecoderCache.mark_padding)
        self.shared: list[tuple[Tensor, Tensor]] = []  # read-only keys/values of positions 0.. (see share())
        self.release: Callable[[], None] | None = None  # told once when the shared parts are let go

    @property
    def capacity(self) -> int:
        return self.k.size(2)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H, T, D) keys/values; return the keys/values the T queries attend over: every filled
        position (B, H, length, D), or for a ring that wrapped, the ones it holds (see :meth:`visible`)."""
        n, t, c = self.length, k.size(2), self.capacity
        if n + t <= c:  # no wrap: slots are columns
            self.k[:, :, n:n + t], self.v[:, :, n:n + t] = k, v
            self.length, self.columns, p = n + t, None, self.shared_length
            return self.k[:, :, p:n + t], self.v[:, :, p:n + t]  # past the shared positions (0 without)
        if self.window is None or c < self.window:
            raise ValueError(f"KV cache full: {n + t} positions asked, {c} preallocated")
        if t == 1:  # a decoding step: the new position overwrites the oldest slot; attend over the whole ring
            self.write(n, k, v)
            self.columns = n - (n - torch.arange(c, device=k.device)) % c  # (c,) each slot's position
            return self.k, self.v
        held = max(self.first, n - self.window + 1)  # the oldest position the new queries see
        old = self.read(held, n)
        keys, values = (torch.cat([dense(o, new.dtype), new], dim=2)  # (B, H, n-held+t, D)
                        for o, new in zip(old, (k, v), strict=True))
        self.write(held, keys, values)
        self.columns = slice(held, n + t)
        return keys, values

    def visible(self, mask: Tensor | None) -> Tensor | None:
        """``mask`` (.., T, length) over every position, cut to the keys :meth:`update` returned last."""
        if mask is None or self.columns is None:
            return mask
        if isinstance(self.columns, slice):
            return mask[..., self.columns]
        return mask.index_select(-1, self.columns)

    def write(self, start: int, k: Tensor, v: Tensor) -> None:
        """Keys/values (B, H, T, D) of positions ``start``.. into their slots (a ring keeps the last ``capacity``);
        ``length`` becomes their end."""
        end, c = start + k.size(2), self.capacity
        first = max(start, end - c)
        slots = _slots(first, end, c, k.device)
        self.k[:, :, slots], self.v[:, :, slots] = k[:, :, first - start:], v[:, :, first - start:]
        self.length, self.first = end, max(self.first, end - c)

    def written(self, end: int) -> None:
        """Positions up to ``end`` are in their slots, written in place (the static step's ``index_copy_``, a
        prompt cache's blocks): the counters follow."""
        self.length, self.first, self.columns = end, max(self.first, end - self.capacity), None

    def attend_apart(self, runs: list[tuple[int, int, int]] | None) -> None:
        """Rows attended in ``runs`` (:func:`runs_of`) from their first real column; a ring is attended whole."""
        self.runs = runs if self.window is None else None

    def zero_unwritten(self) -> None:
        """Zero the slots no position has reached yet, once (the static step, ``model/static.py``, attends every
        slot under its mask, and 0 x NaN is NaN); later writes keep every slot finite."""
        if not self.zeroed and self.length < self.capacity:
            self.k[:, :, self.length:] = 0
            self.v[:, :, self.length:] = 0
        self.zeroed = True

    @property
    def quantized(self) -> bool:
        """Whether keys and values are kept as int8 rows (they are then never shared: :meth:`share`)."""
        return isinstance(self.k, Int8Rows)

    @property
    def shared_length(self) -> int:
        return sum(k.size(2) for k, _ in self.shared)

    def share(self, parts: list[tuple[Tensor, Tensor]], release: Callable[[], None] | None = None) -> None:
        """Positions 0.. are ``parts``' keys and values (1, H, t, D), one part after another, read where they lie
        and never written (a prompt cache's blocks, shared by every row that starts with them: vLLM's shared
        blocks; attention reads them a part at a time, ``model/attention.py``); the cache's own slots hold the
        positions after them. One row, a full layer. ``release`` is told when they are let go."""
        if self.window is not None or self.k.size(0) != 1 or self.quantized:
            raise ValueError("KV cache: only a one-row full float layer reads shared positions")
        self.shared, self.release = list(parts), release
        self.length = self.shared_length

    def materialize(self) -> None:
        """Copy the shared positions into the cache's own slots and let them go (before the row is reordered,
        rolled back or joins a batch)."""
        start = 0
        for k, v in self.shared:
            self.k[:, :, start:start + k.size(2)], self.v[:, :, start:start + k.size(2)] = k, v
            start += k.size(2)
        self.shared, release, self.release = [], self.release, None
        if release is not None:
            release()

    def read(self, start: int, end: int) -> tuple[Tensor, Tensor] | None:
        """Keys and values (B, H, end - start, D) of positions start..end-1, in order; None if they are not all
        held (a ring overwrote some)."""
        if start < self.first or end > self.length:
            return None
        if start < self.shared_length:  # from the shared parts, then the own slots after them (a copy)
            pieces, first = [], 0
            for k, v in [*self.shared, (self.k[:, :, self.shared_length:], self.v[:, :, self.shared_length:])]:
                a, b = max(start, first), min(end, first + k.size(2))
                if a < b:
                    pieces.append((k[:, :, a - first:b - first], v[:, :, a - first:b - first]))
                first += k.size(2)
            return torch.cat([k for k, _ in pieces], dim=2), torch.cat([v for _, v in pieces], dim=2)
        slots = _slots(start, end, self.capacity, self.k.device)
        return self.k[:, :, slots], self.v[:, :, slots]

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the batch (beam search), in that order; ``index`` has the batch's size.

        Only the filled slots are moved: the preallocated rest is never read before it is written.
        """
        self.materialize()
        n = min(self.length, self.capacity)
        self.k[:, :, :n] = self.k[:, :, :n].index_select(0, index)
        self.v[:, :, :n] = self.v[:, :, :n].index_select(0, index)

    def truncate(self, length: int) -> None:
        """Forget positions from ``length`` on (speculative decoding rolls rejected tokens back); a ring must still
        hold the window of the next position."""
        if self.window is not None and length < self.length and max(0, length - self.window + 1) < self.first:
            raise ValueError(f"KV cache: a sliding layer's ring cannot roll back {self.length - length} positions "
                             f"(at most {ROLLBACK})")
        if length < self.shared_length:
            self.materialize()
        self.length = min(self.length, length)

    @classmethod
    def holding(cls, k: Tensor, v: Tensor, length: int, window: int | None = None, zeroed: bool = False) -> KVCache:
        """A cache around existing (B, H, capacity, D) tensors holding positions up to ``length`` (``zeroed``: the
        slots past it are zeros)."""
        cache = cls.__new__(cls)
        cache.k, cache.v, cache.length, cache.window, cache.columns, cache.runs = k, v, length, window, None, None
        cache.shared, cache.release, cache.zeroed = [], None, zeroed
        cache.first = max(0, length - k.size(2))
        return cache

    @classmethod
    def assemble(cls, parts: list[tuple[KVCache, Tensor | None, int]], capacity: int,
                 starts: list[int] | None = None) -> KVCache:
        """A new cache of ``capacity`` positions (a ring: at most its window and ROLLBACK) holding, one part after
        the other, the rows ``index`` (None: all) of each part's cache with their positions moved by ``shift``:
        right (padding columns in front) or left (< 0: that many front positions dropped). Every part must then
        end at the same position; only held positions are copied. The slots no position has reached are left as they
        are in a full layer (the eager step reads none; the static step, ``model/static.py``, which attends every
        slot under its mask, zeroes them first: 0 x NaN is NaN) and zeros in a ring.

        Padding is zeros (a masked key still multiplies its value by 0, and 0 * NaN is NaN), but where ``starts``
        (each row's first real column) is given a full layer zeroes only the ``SLACK`` columns before it: its
        rows are attended apart (:func:`runs_of`), so the rest of the padding is never read, nor its memory
        touched (a long prompt joining short rows costs its own columns, not the batch's width)."""
        ends = {kv.length + shift for kv, _, shift in parts}
        first = parts[0][0]
        if first.window is not None:
            capacity = min(capacity, first.window + ROLLBACK)
        if len(ends) != 1 or (first.window is None and max(ends) > capacity):
            raise ValueError(f"KV cache: parts ending at {sorted(ends)} cannot share {capacity} positions")
        n = ends.pop()
        low = max(0, n - capacity)  # the first position the new cache holds
        sizes = [kv.k.size(0) if index is None else index.numel() for kv, index, _ in parts]
        shape = (sum(sizes), first.k.size(1), capacity, first.k.size(3))  # (B, H, capacity, D)
        k, v = first.k.new_empty(shape), first.v.new_empty(shape)
        ragged = starts is not None and first.window is None
        row = 0
        for (kv, index, shift), size in zip(parts, sizes, strict=True):
            rows, front = slice(row, row + size), max(low, kv.first + shift)
            for big, held in zip((k, v), kv.read(front - shift, kv.length), strict=True):  # (b, H, n - front, D)
                big[rows, :, _slots(front, n, capacity, k.device)] = (held if index is None
                                                                      else held.index_select(0, index))
                if not ragged:
                    big[rows, :, _slots(low, front, capacity, k.device)] = 0
            row += size
        for b, start in enumerate(starts if ragged else []):
            k[b, :, max(0, start - SLACK):start] = v[b, :, max(0, start - SLACK):start] = 0
        ring = first.window is not None
        if ring:  # a ring is attended whole once it wraps: its slots not yet written are zeros
            k[:, :, n - low:] = v[:, :, n - low:] = 0
        return cls.holding(k, v, n, first.window, zeroed=ring)  # a full layer's: zero_unwritten, for the static step


def runs_of(starts: list[int]) -> list[tuple[int, int, int]] | None:
    """Rows of a batch whose real columns begin at ``starts`` (their left padding), as runs of neighbours that
    are attended together: (first row, end row, the run's first column), each row's start within ``SLACK`` of
    it. None when one run from column 0 holds every row (no padding to skip)."""
    runs: list[list[int]] = []  # [first row, end row, lowest start, highest start]
    for row, start in enumerate(starts):
        if runs and max(runs[-1][3], start) - min(runs[-1][2], start) <= SLACK:
            runs[-1][1:] = [row + 1, min(runs[-1][2], start), max(runs[-1][3], start)]
        else:
            runs.append([row, row + 1, start, start])
    if len(runs) == 1 and runs[0][2] == 0:
        return None
    return [(a, b, low) for a, b, low, _ in runs]


def _slots(start: int, end: int, capacity: int, device: torch.device) -> slice | Tensor:
    """The slots of positions start..end-1 (at most ``capacity`` of them): a slice unless they wrap."""
    if end <= start or start // capacity == (end - 1) // capacity:
        return slice(start % capacity, start % capacity + max(0, end - start))
    return torch.arange(start, end, device=device) % capacity
