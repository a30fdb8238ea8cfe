"""Greedy search, and the rows of one token per step it shares with sampling (SPEC section 3)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.decoding.core import Columns, strip
from aiayn.decoding.engine import run
from aiayn.model.transformer import TransformerModel

Chooser = Callable[[Tensor], Tensor]  # (B, V) scores with forbidden tokens at -inf -> (B,) columns picked


def argmax(scores: Tensor) -> Tensor:
    """Greedy choice: (B, V) -> (B,) columns."""
    return scores.argmax(dim=-1)


class TokenRows:
    """Rows that each take one token per step, picked by ``choose``, until EOS or their limit (an engine group).

    Args:
        limits: (B,) new tokens allowed per row.
        choose: (B, V) scores, forbidden tokens at -inf -> (B,) columns (arg-max; a seeded draw for sampling).
        min_new_tokens: EOS is not allowed before this many tokens. BOS and PAD are never generated.
        on_token: ``on_token(next_ids (B,), live (B,) bool)`` after every step (streaming); ``live`` is False
            for rows that had already finished (their next id is PAD).
    After each step ``last_scores`` holds the step's scores (forbidden tokens at -inf), e.g. for log-probabilities.
    """

    def __init__(self, limits: Tensor, choose: Chooser, eos_id: int, pad_id: int, min_new_tokens: int = 0,
                 on_token: Callable[[Tensor, Tensor], None] | None = None) -> None:
        self.limits, self.choose, self.eos_id, self.pad_id = limits, choose, eos_id, pad_id
        self.min_new_tokens, self.on_token = min_new_tokens, on_token
        self.size, self.longest, self.steps = limits.numel(), int(limits.max()) if limits.numel() else 0, 0
        self.finished = limits <= 0  # (B,)
        self.generated: list[Tensor] = []  # one (B,) per step
        self.last_scores: Tensor | None = None

    @property
    def done(self) -> bool:
        return bool(self.finished.all())

    def cancel(self) -> None:
        """Finish every row now (a client went away)."""
        self.finished = torch.ones_like(self.finished)

    def advance(self, scores: Tensor, columns: Columns) -> tuple[Tensor, None]:
        self.last_scores = scores = columns.forbid(scores, self.steps < self.min_new_tokens)  # (B, V) or (B, C)
        nxt = columns.token_ids(self.choose(scores)).masked_fill(self.finished, self.pad_id)  # (B,)
        if self.on_token is not None:
            self.on_token(nxt, ~self.finished)
        self.generated.append(nxt)
        self.steps += 1
        self.finished = self.finished | (nxt == self.eos_id) | (self.limits <= self.steps)
        return nxt, None

    def results(self) -> list[list[int]]:
        """Per row, the generated ids without the final EOS."""
        if not self.generated:
            return [[] for _ in range(self.size)]
        rows = torch.stack(self.generated, dim=1).tolist()  # (B, steps)
        return [strip(row, self.eos_id, self.pad_id) for row in rows]


def decode_loop(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int, choose: Chooser,
                min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None,
                on_token: Callable[[Tensor, Tensor], None] | None = None,
                candidates: Tensor | None = None) -> list[list[int]]:
    """Append one token per step, picked by ``choose``, until EOS or the row's limit (:class:`TokenRows` run by
    the engine, :func:`aiayn.decoding.engine.run`).

    Returns, per row, the generated ids without BOS and without the final EOS. ``max_new_tokens`` may be a
    (B,) tensor. ``prompt_cache`` (decoder-only, batch 1) supplies the keys/values of a stored prompt prefix.
    ``candidates`` (C,): the only ids that may be generated (a shortlist).
    """
    cfg = model.config
    limits = torch.as_tensor(max_new_tokens, device=src_ids.device).expand(src_ids.size(0))  # (B,)
    rows = TokenRows(limits, choose, cfg.eos_id, cfg.pad_id, min_new_tokens, on_token)
    return run(model, rows, src_ids, use_cache=use_cache, candidates=candidates, prompt_cache=prompt_cache).results()


def greedy_search(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int,
                  min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None,
                  on_token: Callable[[Tensor, Tensor], None] | None = None,
                  candidates: Tensor | None = None) -> list[list[int]]:
    """Arg-max at every step. ``src_ids``: source ids (encoder-decoder) or the prompt (decoder-only)."""
    return decode_loop(model, src_ids, max_new_tokens, argmax, min_new_tokens, use_cache, prompt_cache,
                       on_token, candidates)
