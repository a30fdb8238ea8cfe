"""The decoding step with shapes that do not change (gpt-fast's static cache, as SGLang's CPU backend compiles it).

The eager step (``DecoderOnly.step``) asks its caches where the new keys go, how many positions to attend and which
rotary rows to read, in Python ints: each token is a new set of shapes. The static step
(``DecoderOnly.step_static``, the decoder's second way to run) asks the same of tensors instead, through this module's
cache and masks. The cache column ``column`` (1,) is a tensor; each layer's keys and values are written at slot
``column % capacity`` (``index_copy_``), the slots are attended under a mask made from ``column`` (causal,
sliding window, left padding: bool, True = may attend) and the rotary angles are computed from the positions
tensor. One token a row, the same shapes at every position: one compiled graph serves a whole generation
(``aiayn.inference.compiled``). A verifying pass of speculative decoding feeds one row several columns (its last
token and a draft's guesses, at most :data:`COLUMNS`): the same step with the columns' count a size the graph takes
as it comes. The eager step stays the reference: this one equals it token for token.

Attending every slot costs as much as the cache is long, not the text: at a capacity of 4,096 a step of a short
text took 27 ms against 5 ms at 256 (SmolLM2 ``--int4``, compiled: ``benchmarks/bench_static_span.py``). So a full
layer attends only its first ``span`` slots (a size the caller rounds up past the column, :func:`span_of`, passed
as a tensor's length: a size the compiled graph takes as it comes, never a new graph); a sliding layer's ring,
bounded by its window, is attended whole.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model.cache import DecoderCache
from aiayn.model.kv_cache import ROLLBACK, LayerKV
from aiayn.model.state import DecodeState

COLUMNS = ROLLBACK + 1  # the most new columns a static step takes: a ring keeps the window of its first one


class StaticKV(LayerKV):
    """One layer's keys and values (B, H_kv, capacity, D), written in place at ``slots`` (C,) and attended whole:
    the :class:`~aiayn.model.kv_cache.LayerKV` that ``MultiHeadAttention`` asks of a cache, with no Python int that
    changes from token to token."""

    runs = None  # rows are attended together (their padding is masked)
    shared = ()  # every position is in the layer's own slots

    def __init__(self, k: Tensor, v: Tensor, slots: Tensor, span: int | None = None) -> None:
        self.k, self.v, self.slots, self.span = k, v, slots, span

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The new (B, H_kv, C, D) keys and values written at the slots; the first ``span`` slots (every slot
        without one) returned, (B, H_kv, span, D)."""
        self.k.index_copy_(2, self.slots, k)
        self.v.index_copy_(2, self.slots, v)
        if self.span is None:
            return self.k, self.v
        return self.k.narrow(2, 0, self.span), self.v.narrow(2, 0, self.span)  # (B, H_kv, span, D)

    def visible(self, mask: Tensor | None) -> Tensor | None:
        return mask  # made over every slot already


class StaticCache(DecoderCache):
    """The layers' :class:`StaticKV` in a :class:`DecoderCache`, as ``Decoder.forward`` reads one."""

    position = None  # no relative position bias reads it (such models step eagerly)


def slots_of(column: Tensor, columns: int, capacity: int) -> Tensor:
    """The slots (C,) that cache columns ``column`` (1,) .. ``column + columns - 1`` are written to: each column modulo
    the cache's ``capacity`` (a ring's, or a full layer's, longer than the text)."""
    return (column + torch.arange(columns, device=column.device)) % capacity


def slot_mask(column: Tensor, left_pad: Tensor, capacity: int, window: int | None, columns: int = 1) -> Tensor:
    """Which slots of a cache of ``capacity`` the queries at cache columns ``column`` (1,) .. ``column + columns - 1``
    may attend, once all are written: bool (B, 1, columns, capacity), True = may attend. Slot s holds column ``last -
    (last - s) % capacity`` of the last column (a ring's latest, or s itself where the cache is longer than the
    text); a query sees it when that column is real (at or after the row's ``left_pad`` (B,)), not after its own and,
    with a ``window``, among the window's latest columns up to its own."""
    queries = column + torch.arange(columns, device=column.device)  # (C,)
    slots = torch.arange(capacity, device=column.device)
    last = queries[-1:]
    held = last - (last - slots) % capacity  # (capacity,): the column each slot holds (< 0: none yet)
    low = left_pad[:, None, None]  # (B, 1, 1)
    if window is not None:
        low = torch.clamp(queries[None, :, None] - window + 1, min=low)  # (B, C, 1)
    seen = (held >= low) & (held <= queries[:, None])  # (B, C, capacity)
    return seen[:, None]  # (B, 1, C, capacity)


SPAN = 64  # a full layer attends its cache's slots up to the column rounded up to a multiple of this (span_of)


def span_of(column: int, capacity: int) -> int:
    """How many of a full layer's ``capacity`` slots a step at cache column ``column`` attends: the column rounded
    up past it to a multiple of :data:`SPAN` (the slots after the column are masked), never the whole cache (a graph
    traced with the two apart stays right for every later step; the last slot is the eager step's:
    :func:`static_inputs`)."""
    return min(capacity - 1, (column // SPAN + 1) * SPAN)


def static_inputs(model, tokens: Tensor, state: DecodeState,
                  last: bool = False) -> tuple[Tensor, Tensor, list[Tensor]] | None:
    """What ``DecoderOnly.step_static`` takes for the eager ``model.step(tokens, state, last)``: the new columns (B,
    C), the left padding (B,) and the caches' tensors; None where the step is not one it computes (a prompt: more
    than one new column with ``last``, or more than :data:`COLUMNS`; a shortlist's or an adapter's rows, a position
    bias, rows attended apart, no cache or an int8 one (``model/kv_int8.py``); columns past a full layer's last
    slot but one, or more than a ring keeps beyond its window)."""
    cache = state.cache
    new = tokens[:, state.position:]  # (B, C): the columns not yet in the cache
    c = new.size(1)
    if (cache is None or cache.layers[0].self_kv.quantized or not 1 <= c <= COLUMNS or (last and c > 1)
            or state.output is not None or state.adapters is not None or model.decoder.position_bias is not None):
        return None
    left_pad = state.left_pad if state.left_pad is not None else torch.zeros(new.size(0), dtype=torch.long,
                                                                              device=new.device)
    cache.mark_padding(state.left_pad)
    if any(kv.runs is not None or (kv.window is None and kv.length + c >= kv.capacity)  # apart; a full layer's
           or (kv.window is not None and kv.length + c > kv.capacity and kv.capacity - kv.window < c - 1)
           for kv in (layer.self_kv for layer in cache.layers)):  # last slot (span_of); a ring's first query's window
        return None
    for layer in cache.layers:
        layer.self_kv.materialize()  # shared prompt-cache blocks copied in (the eager step reads them in place)
        layer.self_kv.zero_unwritten()  # every slot is attended under the mask: none may hold NaN
    return new, left_pad, [t for layer in cache.layers for t in (layer.self_kv.k, layer.self_kv.v)]


def advance(cache: DecoderCache, columns: int = 1) -> None:
    """Each layer's cache told that ``columns`` positions were written in place (what ``KVCache.update`` counts)."""
    for layer in cache.layers:
        layer.self_kv.written(layer.self_kv.length + columns)
