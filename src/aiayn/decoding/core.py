"""What every decoding strategy shares: the tokens never generated, the columns of the scores (all tokens or a
shortlist), the length policy, cutting a finished row, and the stepper speculative decoding drives.

A model exposes ``start(inputs, max_new_tokens, use_cache, beams) -> (tokens, state)`` and
``step(tokens, state) -> logits``; this module knows nothing about which family member it drives.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model.config import ModelConfig
from aiayn.model.transformer import TransformerModel


def never_generated(cfg: ModelConfig) -> tuple[int, ...]:
    """An encoder-decoder never generates PAD nor BOS (BOS starts every target and never follows a token). A language
    model generates its BOS (a document boundary, as Hugging Face does), and its pad id only where that is a word of
    its vocabulary (``pad_is_token``: Gemma's ``<pad>``); never the padding row aiayn appends to an imported
    vocabulary, nor the pad id of aiayn's own tokenizers (never a training target)."""
    if cfg.arch == "encoder-decoder":
        return cfg.pad_id, cfg.bos_id
    return () if cfg.pad_is_token else (cfg.pad_id,)


def forbid(logits: Tensor, cfg: ModelConfig, no_eos: bool) -> Tensor:
    """:func:`never_generated` tokens get -inf; EOS (every end id) too while ``no_eos`` (min length). (..., V),
    in place."""
    for token in never_generated(cfg) + (cfg.end_ids if no_eos else ()):
        logits[..., token] = float("-inf")  # one column at a time: cheaper than a list index per step
    return logits


def as_eos(tokens: Tensor, cfg: ModelConfig) -> Tensor:
    """``tokens`` with every one of the config's ``stop_ids`` replaced by EOS: an end-of-turn token ends a
    sequence exactly as EOS does (one rule for every strategy)."""
    if not cfg.stop_ids:
        return tokens
    return tokens.masked_fill(torch.isin(tokens, torch.tensor(cfg.stop_ids, device=tokens.device)), cfg.eos_id)


def strip(row: list[int], eos_id: int) -> list[int]:
    """Cut a generated row at its first EOS."""
    return row[: row.index(eos_id)] if eos_id in row else row


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


class Columns:
    """What the columns of a decode's scores are: all V tokens, or a vocabulary shortlist's C candidates
    (``aiayn.inference.shortlist``: the model then scores just those, its output projection cut to their rows,
    so a search's softmax and top-k run over C columns, not V). Forbids tokens and maps columns to ids."""

    def __init__(self, cfg: ModelConfig, candidates: Tensor | None = None) -> None:
        self.cfg, self.candidates = cfg, candidates
        if candidates is not None:
            self._never = torch.isin(candidates, torch.tensor(never_generated(cfg), device=candidates.device))  # (C,)
            self._eos = torch.isin(candidates, torch.tensor(cfg.end_ids, device=candidates.device))  # (C,) bool

    def forbid(self, scores: Tensor, no_eos: bool) -> Tensor:
        """:func:`forbid` on scores (B, V) or (B, C), in place."""
        if self.candidates is None:
            return forbid(scores, self.cfg, no_eos)
        scores.masked_fill_(self._never, float("-inf"))  # (B, C) with a (C,) mask
        return scores.masked_fill_(self._eos, float("-inf")) if no_eos else scores

    def token_ids(self, columns: Tensor) -> Tensor:
        """The token ids of score columns (the same ids without candidates), every end id as EOS."""
        return as_eos(columns if self.candidates is None else self.candidates[columns], self.cfg)


class Stepper:
    """Next-token scores for every row, given all its tokens so far; with a cache, only the columns not
    yet in the cache are fed to the model (speculative decoding's main and draft models).

    Args:
        inputs: (B, S) sources (encoder-decoder) or right-padded prompts (decoder-only).
        max_new_tokens: room to leave in the cache after the start tokens.
        beams: each input stands for this many consecutive rows.
    """

    def __init__(self, model: TransformerModel, inputs: Tensor, max_new_tokens: int, use_cache: bool = True,
                 beams: int = 1) -> None:
        self.model = model
        self.start_tokens, self.state = model.start(inputs, max_new_tokens, use_cache, beams)  # (B*beams, t0)
        self.cache = self.state.cache

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (B, t) -> logits (B, V) for column t."""
        return self.model.step(tokens, self.state, last=True)[:, -1]

    def score_new(self, tokens: Tensor) -> Tensor:
        """Logits (B, t', V) for every column not yet in the cache (all t columns without one)."""
        return self.model.step(tokens, self.state)
