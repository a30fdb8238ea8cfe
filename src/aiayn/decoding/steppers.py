"""Next-token scorers over a model: they hide encoder-decoder vs decoder-only and the cache."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.masks import padding_mask
from aiayn.models import DecoderOnly, EncoderDecoder, TransformerModel


def start_tokens(model: TransformerModel, src_ids: Tensor) -> Tensor:
    """What generation starts from: BOS for an encoder-decoder, the prompt for a decoder-only model."""
    if isinstance(model, EncoderDecoder):
        return torch.full((src_ids.size(0), 1), model.config.bos_id, dtype=torch.long, device=src_ids.device)
    return src_ids


class Stepper:
    """Scores the next token for every row given all tokens so far.

    With a cache, only the positions not yet in the cache are fed to the model.
    """

    def __init__(self, model: TransformerModel, src_ids: Tensor | None, batch: int, max_len: int,
                 use_cache: bool = True, prompt_cache=None, beams: int = 1) -> None:
        """``beams``: each source row stands for this many consecutive decoding rows (beam search);
        the source is encoded once and its memory repeated."""
        self.model = model
        self.memory = self.src_mask = None
        like = next(model.parameters())  # the cache takes the model's device and dtype
        if isinstance(model, EncoderDecoder):
            self.memory = model.encode(src_ids).repeat_interleave(beams, dim=0)  # (B*beams, S, D)
            self.src_mask = padding_mask(src_ids, model.config.pad_id).repeat_interleave(beams, dim=0)
            if bool(self.src_mask.all()):
                self.src_mask = None  # no padding: no mask, the fastest attention path
            like = self.memory
        elif not isinstance(model, DecoderOnly):
            raise TypeError(f"{type(model).__name__} cannot generate: use an EncoderDecoder or DecoderOnly")
        self.cache = model.new_cache(batch, max_len, like) if use_cache else None
        if prompt_cache is not None and self.cache is not None and batch == 1:
            prompt_cache.fill(src_ids, self.cache)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (B, t) -> logits (B, V) for position t."""
        return self.score_new(tokens)[:, -1]

    def score_new(self, tokens: Tensor) -> Tensor:
        """Logits (B, t', V) for every position not yet in the cache (all t positions without a cache)."""
        new = tokens if self.cache is None else tokens[:, self.cache.position:]
        if self.memory is not None:
            return self.model.decode(new, self.memory, self.src_mask, self.cache)  # (B, t', V)
        return self.model.decode(new, self.cache)

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """Keep rows ``index`` (beam search). ``within_groups``: rows move only among the beams of their
        own sentence, which share one source, so the memory and cross-attention keys/values stay."""
        if self.memory is not None and not within_groups:
            self.memory = self.memory.index_select(0, index)
            if self.src_mask is not None:
                self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, within_groups)
