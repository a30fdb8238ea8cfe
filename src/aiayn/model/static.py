"""The decoding step with shapes that do not change (gpt-fast's static cache, as SGLang's CPU backend compiles it).

The eager step (``DecoderOnly.step``) asks its caches where the new keys go, how many positions to attend and which
rotary rows to read, in Python ints: each token is a new set of shapes. :func:`static_step` asks the same of
tensors instead. The cache column ``column`` (1,) is a tensor; each layer's keys and values are written at slot
``column % capacity`` (``index_copy_``), every slot is attended under a mask made from ``column`` (causal,
sliding window, left padding: bool, True = may attend) and the rotary angles are computed from the positions
tensor. One token a row, the same shapes at every position: one compiled graph serves a whole generation
(``aiayn.inference.compiled``). The eager step stays the reference: this one equals it token for token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model.cache import DecoderCache
from aiayn.model.state import DecodeState


class StaticKV:
    """One layer's keys and values (B, H_kv, capacity, D), written in place at ``slot`` (1,) and attended whole:
    what ``MultiHeadAttention`` asks of a :class:`~aiayn.model.cache.KVCache`, and ``DecoderLayer`` of its
    :class:`~aiayn.model.cache.LayerCache`, with no Python int that changes from token to token."""

    runs = None  # rows are attended together (their padding is masked)
    shared = ()  # every position is in the layer's own slots
    cross_kv = None  # a decoder-only layer's

    def __init__(self, k: Tensor, v: Tensor, slot: Tensor) -> None:
        self.k, self.v, self.slot = k, v, slot

    @property
    def self_kv(self) -> StaticKV:
        return self

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The new (B, H_kv, 1, D) keys and values written at the slot; every slot returned (B, H_kv, capacity, D)."""
        self.k.index_copy_(2, self.slot, k)
        self.v.index_copy_(2, self.slot, v)
        return self.k, self.v

    def visible(self, mask: Tensor | None) -> Tensor | None:
        return mask  # made over every slot already


class StaticCache:
    """The layers' :class:`StaticKV`, as ``Decoder.forward`` reads a :class:`DecoderCache`."""

    position = None  # no relative position bias reads it (such models step eagerly)

    def __init__(self, layers: list[StaticKV]) -> None:
        self.layers = layers


def slot_mask(column: Tensor, left_pad: Tensor, capacity: int, window: int | None) -> Tensor:
    """Which slots of a cache of ``capacity`` the query at cache column ``column`` (1,) may attend: bool (B, 1, 1,
    capacity), True = may attend. Slot s holds column ``column - (column - s) % capacity`` (a ring's latest, or s
    itself where the cache is longer than the text); it is seen when that column is real (at or after the row's
    ``left_pad`` (B,)) and, with a ``window``, among the window's latest columns."""
    slots = torch.arange(capacity, device=column.device)
    held = column - (column - slots) % capacity  # (capacity,): the column each slot holds (< 0: none yet)
    low = left_pad[:, None] if window is None else torch.clamp(column - window + 1, min=left_pad[:, None])
    return (held >= low)[:, None, None, :]  # (B, 1, 1, capacity)


def static_step(model, tokens: Tensor, column: Tensor, left_pad: Tensor, kv: list[Tensor],
                windows: list[int | None]) -> Tensor:
    """Logits (B, 1, V) of one new token a row, ``tokens`` (B, 1), at cache column ``column`` (1,).

    Args:
        model: a ``DecoderOnly`` (no relative position bias).
        left_pad: (B,) padding columns in front of each row (its positions are column - left_pad).
        kv: every layer's keys and values, k0, v0, k1, v1, ... (B, H_kv, capacity_i, D), written in place.
        windows: each layer's sliding window (its cache a ring) or None.
    """
    positions = column - left_pad  # (B,) each row's position at this column
    masks: dict[int | None, Tensor] = {}
    layers = []
    for i, window in enumerate(windows):
        k, v = kv[2 * i], kv[2 * i + 1]
        capacity = k.size(2)
        if window not in masks:  # one mask per kind of layer (their rings have one capacity)
            masks[window] = slot_mask(column, left_pad, capacity, window)
        layers.append(StaticKV(k, v, column % capacity))
    local = [w for w, layer in zip(windows, model.decoder.layers, strict=True) if layer.local]
    full = [w for w, layer in zip(windows, model.decoder.layers, strict=True) if not layer.local]
    x = model.embed(tokens, positions)  # (B, 1, D)
    hidden, _ = model.decoder(x, None, masks[full[0]] if full else None, None, StaticCache(layers), positions,
                              local_mask=masks[local[0]] if local else None)
    return model._project(hidden, None)  # (B, 1, V)


def static_inputs(model, tokens: Tensor, state: DecodeState) -> tuple[Tensor, Tensor, list[Tensor]] | None:
    """What :func:`static_step` takes for the eager ``model.step(tokens, state)``: the new column (B, 1), the
    left padding (B,) and the caches' tensors; None where the step is not one it computes (several new columns,
    a shortlist's or an adapter's rows, a position bias, rows attended apart, no cache)."""
    cache = state.cache
    new = tokens[:, state.position:]  # (B, t): the columns not yet in the cache
    if (cache is None or new.size(1) != 1 or state.output is not None or state.adapters is not None
            or model.decoder.position_bias is not None):
        return None
    left_pad = state.left_pad if state.left_pad is not None else torch.zeros(new.size(0), dtype=torch.long,
                                                                              device=new.device)
    cache.mark_padding(state.left_pad)
    if any(kv.runs is not None or (kv.window is None and kv.length >= kv.capacity)  # apart; full (eager says so)
           for kv in (layer.self_kv for layer in cache.layers)):
        return None
    for layer in cache.layers:
        layer.self_kv.materialize()  # shared prompt-cache blocks copied in (the eager step reads them in place)
        layer.self_kv.zero_unwritten()  # every slot is attended under the mask: none may hold NaN
    return new, left_pad, [t for layer in cache.layers for t in (layer.self_kv.k, layer.self_kv.v)]


def advance(cache: DecoderCache) -> None:
    """Each layer's cache told that one position was written in place (what ``KVCache.update`` counts)."""
    for layer in cache.layers:
        kv = layer.self_kv
        kv.length += 1
        kv.first, kv.columns = max(kv.first, kv.length - kv.capacity), None
