"""What a model keeps between decoding steps (``TransformerModel.start`` / ``.step``): the KV cache
(``model/cache.py``) with each row's source memory, padding, output projection and adapter, reordered for beams
and assembled for continuous batching (``aiayn.decoding.engine``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.model.cache import DecoderCache, pad_to


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
        adapters: (B,) the LoRA adapter each row runs (0: the base model; ``model/multi_lora.py``); None: all
            the base.
    """

    cache: DecoderCache | None
    memory: Tensor | None = None
    src_mask: Tensor | None = None
    left_pad: Tensor | None = None
    output: Callable[[Tensor], Tensor] | None = None
    adapters: Tensor | None = None

    @property
    def position(self) -> int:
        """Columns already in the cache (0 without a cache: every step feeds all columns)."""
        return 0 if self.cache is None else self.cache.position

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """Keep rows ``index`` (beam search). ``within_groups``: rows move only among the beams of their
        own input, which share one source and one padding, so those need no copy."""
        if not within_groups:
            self.memory, self.src_mask, self.left_pad, self.adapters = (
                None if t is None else t.index_select(0, index)
                for t in (self.memory, self.src_mask, self.left_pad, self.adapters))
        if self.cache is not None:
            self.cache.reorder(index, within_groups)

    @classmethod
    def assemble(cls, parts: list[tuple[DecodeState, Tensor | None, int]], capacity: int) -> DecodeState:
        """Continuous batching (``aiayn.decoding.engine``): one state holding, part after part, the rows
        ``index`` (None: all) of each state with ``shift`` more (or, < 0, fewer) padding columns in front of
        them; its cache has ``capacity`` positions. Sources of different lengths are padded to the longest
        (masked: the source mask is False there)."""
        pick = lambda t, index: t if index is None else t.index_select(0, index)  # noqa: E731
        memory = src_mask = None
        if parts[0][0].memory is not None:
            s = max(st.memory.size(1) for st, _, _ in parts)
            memory = torch.cat([pad_to(pick(st.memory, index), s, 1) for st, index, _ in parts])  # (B, S, D)
            if any(st.src_mask is not None or st.memory.size(1) != s for st, _, _ in parts):
                src_mask = torch.cat([pad_to(pick(_real(st), index), s, 1, False) for st, index, _ in parts])
        left_pad = torch.cat([pick(_left_pad(st), index) + shift for st, index, shift in parts])  # (B,)
        adapters = None
        if any(st.adapters is not None for st, _, _ in parts):
            adapters = torch.cat([pick(_adapters(st), index) for st, index, _ in parts])  # (B,)
        cache = DecoderCache.assemble([(st.cache, index, shift) for st, index, shift in parts], capacity,
                                      left_pad.tolist())
        return DecodeState(cache, memory, src_mask, left_pad if bool(left_pad.any()) else None, parts[0][0].output,
                           adapters)

    @property
    def rows(self) -> int:
        return self.cache.layers[0].self_kv.k.size(0)


def _real(state: DecodeState) -> Tensor:
    """(B, S) bool, True = a real source token: the state's source mask, or all True without one."""
    if state.src_mask is not None:
        return state.src_mask
    return torch.ones(state.memory.shape[:2], dtype=torch.bool, device=state.memory.device)


def _adapters(state: DecodeState) -> Tensor:
    """(B,) each row's adapter (zeros, the base, when the state has none)."""
    if state.adapters is not None:
        return state.adapters
    return torch.zeros(state.rows, dtype=torch.long, device=state.cache.layers[0].self_kv.k.device)


def _left_pad(state: DecodeState) -> Tensor:
    """(B,) padding columns in front of each row (zeros when the state has none)."""
    if state.left_pad is not None:
        return state.left_pad
    return torch.zeros(state.rows, dtype=torch.long, device=state.cache.layers[0].self_kv.k.device)
