"""What every decoding strategy shares: the stepper over a model's step interface, the tokens never
generated, the length policy, and cutting a finished row.

A model exposes ``start(inputs, max_new_tokens, use_cache, beams) -> (tokens, state)`` and
``step(tokens, state) -> logits``; this module knows nothing about which family member it drives.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model.config import ModelConfig
from aiayn.model.packed import output_rows
from aiayn.model.transformer import TransformerModel


def never_generated(cfg: ModelConfig) -> tuple[int, ...]:
    """PAD is never generated, nor BOS by an encoder-decoder (it starts every target and never follows a
    token); a language model's BOS is a token it learned (a document boundary), generated as Hugging Face does."""
    return (cfg.pad_id, cfg.bos_id) if cfg.arch == "encoder-decoder" else (cfg.pad_id,)


def forbid(logits: Tensor, cfg: ModelConfig, no_eos: bool) -> Tensor:
    """:func:`never_generated` tokens get -inf; EOS too while ``no_eos`` (min length). (..., V), in place."""
    for token in never_generated(cfg):
        logits[..., token] = float("-inf")  # one column at a time: cheaper than a list index per step
    if no_eos:
        logits[..., cfg.eos_id] = float("-inf")
    return logits


def strip(row: list[int], eos_id: int, pad_id: int) -> list[int]:
    """Cut a generated row at its first EOS (or padding)."""
    for i, tok in enumerate(row):
        if tok in (eos_id, pad_id):
            return row[:i]
    return row


def length_limits(inputs: Tensor, pad_id: int, max_new_tokens: Tensor | int | None = None,
                  max_len_a: float = 0.0, max_len_b: int | None = None) -> Tensor:
    """New tokens allowed per row, (B,) long: ``max_len_a * input_length + max_len_b`` when ``max_len_b``
    is given (fairseq's policy; input_length counts non-pad tokens), capped by ``max_new_tokens`` (an int
    or a (B,) tensor of per-row limits). At least one of the two must be given."""
    batch = inputs.size(0)
    limits = None
    if max_len_b is not None:
        lengths = (inputs != pad_id).sum(dim=1)  # (B,)
        limits = (max_len_a * lengths + max_len_b).long()
    if max_new_tokens is not None:
        cap = torch.as_tensor(max_new_tokens, device=inputs.device).long().expand(batch)
        limits = cap if limits is None else torch.minimum(limits, cap)
    if limits is None:
        raise ValueError("max_new_tokens: give a limit (or max_len_b for a limit relative to the input)")
    return limits.clamp(min=0)


class Stepper:
    """Next-token scores for every row, given all its tokens so far; with a cache, only the columns not
    yet in the cache are fed to the model.

    Args:
        inputs: (B, S) sources (encoder-decoder) or right-padded prompts (decoder-only).
        max_new_tokens: room to leave in the cache after the start tokens.
        beams: each input stands for this many consecutive rows (beam search, sampling n per input).
        prompt_cache: (decoder-only, one prompt) reuse the stored keys/values of its longest prefix.
        candidates: (C,) the only token ids that may be generated (a vocabulary shortlist,
            ``aiayn.inference.shortlist``): the model scores just those (its output projection cut to their rows),
            and the scores' columns are those candidates: a search picks columns and maps them back with
            :meth:`token_ids`, so its softmax and top-k run over C columns, not V.
    """

    def __init__(self, model: TransformerModel, inputs: Tensor, max_new_tokens: int, use_cache: bool = True,
                 beams: int = 1, prompt_cache=None, candidates: Tensor | None = None) -> None:
        self.model = model
        self.start_tokens, self.state = model.start(inputs, max_new_tokens, use_cache, beams)  # (B*beams, t0)
        self.cache = self.state.cache
        if prompt_cache is not None and self.cache is not None and self.start_tokens.size(0) == 1:
            prompt_cache.fill(self.start_tokens, self.cache)
        self.candidates = candidates
        if candidates is not None:
            self.state.output = output_rows(model.output, candidates)
            cfg = model.config
            self._never = torch.isin(candidates, torch.tensor(never_generated(cfg), device=candidates.device))  # (C,)
            self._eos = candidates == cfg.eos_id  # (C,) bool

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (B, t) -> logits (B, V) for column t, or (B, C) over the candidates."""
        return self.score_new(tokens)[:, -1]

    def score_new(self, tokens: Tensor) -> Tensor:
        """Logits (B, t', V) (or (B, t', C)) for every column not yet in the cache (all t columns without one)."""
        return self.model.step(tokens, self.state)

    def forbid(self, scores: Tensor, no_eos: bool) -> Tensor:
        """:func:`forbid` on scores over this stepper's columns (all V tokens, or the C candidates); in place."""
        if self.candidates is None:
            return forbid(scores, self.model.config, no_eos)
        scores.masked_fill_(self._never, float("-inf"))  # (B, C) with a (C,) mask
        return scores.masked_fill_(self._eos, float("-inf")) if no_eos else scores

    def token_ids(self, columns: Tensor) -> Tensor:
        """The token ids of score columns (the same ids without candidates)."""
        return columns if self.candidates is None else self.candidates[columns]

    def reorder(self, index: Tensor, within_groups: bool = False) -> None:
        """Keep rows ``index`` (beam search); see :meth:`DecodeState.reorder`."""
        self.state.reorder(index, within_groups)
