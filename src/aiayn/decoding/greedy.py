"""The rows of one token per step that greedy search and sampling share; the search itself is
``aiayn.generate`` (``greedy_search`` in ``decoding/generation.py``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.decoding.constraint import allowed
from aiayn.decoding.core import Columns, strip

Chooser = Callable[[Tensor], Tensor]  # (B, V) scores with forbidden tokens at -inf -> (B,) columns picked


def argmax(scores: Tensor) -> Tensor:
    """Greedy choice: (B, V) -> (B,) columns."""
    return scores.argmax(dim=-1)


class TokenRows:
    """Rows that each take one token per step, picked by ``choose``, until EOS or their limit (an engine group).

    Args:
        limits: (B,) new tokens allowed per row.
        choose: (B, V) scores, forbidden tokens at -inf -> (B,) columns (arg-max; a seeded draw for sampling).
        min_new_tokens: EOS is not allowed before this many tokens (``core.never_generated``: never generated).
        on_token: ``on_token(next_ids (B,), live (B,) bool)`` after every step (streaming); ``live`` is False
            for rows that had already finished (their next id is PAD, no part of their output).
        constraints: per row, a grammar its tokens follow (:mod:`aiayn.decoding.constraint`) or None.
        penalties: lowers the scores of tokens each row has seen (:class:`~aiayn.decoding.sampling.Penalties`).
    After each step ``last_scores`` holds the step's scores (forbidden tokens at -inf), e.g. for log-probabilities,
    and ``live`` which rows took a token in it. A finished row's ``reasons`` entry says why: ``"stop"`` (an end
    id, or its grammar complete), ``"length"`` (its limit) or ``"cancelled"``.
    """

    def __init__(self, limits: Tensor, choose: Chooser, eos_id: int, pad_id: int, min_new_tokens: int = 0,
                 on_token: Callable[[Tensor, Tensor], None] | None = None, constraints: list | None = None,
                 penalties=None) -> None:
        self.limits, self.choose, self.eos_id, self.pad_id = limits, choose, eos_id, pad_id
        self.min_new_tokens, self.on_token = min_new_tokens, on_token
        self.size, self.longest, self.steps = limits.numel(), int(limits.max()) if limits.numel() else 0, 0
        self.finished = limits <= 0  # (B,)
        self.live = ~self.finished
        self.reasons: list[str | None] = ["length" if done else None for done in self.finished.tolist()]
        self.penalties = penalties
        self.constraints = constraints if constraints and any(c is not None for c in constraints) else None
        self.generated: list[Tensor] = []  # one (B,) per step
        self.taken = torch.zeros_like(limits, dtype=torch.long)  # (B,) steps each row was live in: its output
        self.last_scores: Tensor | None = None

    @property
    def done(self) -> bool:
        return bool(self.finished.all())

    def cancel(self) -> None:
        """Finish every row now (a client went away)."""
        self.reasons = [r or "cancelled" for r in self.reasons]
        self.finished = torch.ones_like(self.finished)

    def advance(self, scores: Tensor, columns: Columns) -> tuple[Tensor, None]:
        scores = columns.forbid(scores, self.steps < self.min_new_tokens)  # (B, V) or (B, C)
        if self.penalties is not None:
            scores = self.penalties.apply(scores, columns.candidates)
        self.last_scores = scores
        if self.constraints is not None:
            self._constrain(scores)
        nxt = columns.token_ids(self.choose(scores)).masked_fill(self.finished, self.pad_id)  # (B,)
        self.live = ~self.finished
        self.taken += self.live
        if self.penalties is not None:
            self.penalties.take(nxt, self.live)
        if self.on_token is not None:
            self.on_token(nxt, self.live)
        self.generated.append(nxt)
        self.steps += 1
        ended = nxt == self.eos_id
        if self.constraints is not None:
            ended = ended | self._feed(nxt)
        self._finish(ended & self.live, "stop")
        self._finish((self.limits <= self.steps) & ~self.finished, "length")
        return nxt, None

    def _finish(self, rows: Tensor, reason: str) -> None:
        for row in rows.nonzero().flatten().tolist():
            self.reasons[row] = reason
        self.finished = self.finished | rows

    def _constrain(self, scores: Tensor) -> None:
        """Constrained live rows: tokens their grammar does not allow next -> -inf (scores (B, V), in place)."""
        live = self.finished.logical_not().tolist()
        rows = [r for r, c in enumerate(self.constraints) if c is not None and live[r]]
        if rows:
            index = torch.tensor(rows, device=scores.device)
            masks = allowed([self.constraints[r] for r in rows], scores.size(1)).to(scores.device)  # (n, V)
            scores[index] = scores[index].masked_fill(~masks, float("-inf"))
            dead = torch.zeros_like(self.finished)
            dead[index] = ~masks.any(dim=1)  # the grammar allows no token this vocabulary has: the row ends
            self._finish(dead, "stop")

    def _feed(self, nxt: Tensor) -> Tensor:
        """Give each constrained live row's grammar its token; (B,) bool: the rows whose grammar is complete."""
        complete = torch.zeros_like(self.finished)
        for row, (token, constraint) in enumerate(zip(nxt.tolist(), self.constraints, strict=True)):
            if constraint is not None and not self.finished[row]:
                constraint.take(token)
                complete[row] = constraint.stopped
        return complete

    def outputs(self) -> list[tuple[list[int], str]]:
        """Per row: its generated ids (as :meth:`results`) and why it ended."""
        return list(zip(self.results(), [r or "length" for r in self.reasons], strict=True))

    def results(self) -> list[list[int]]:
        """Per row, the ids it generated while live, without the final EOS (a finished row's PAD is not one)."""
        if not self.generated:
            return [[] for _ in range(self.size)]
        rows = torch.stack(self.generated, dim=1).tolist()  # (B, steps)
        return [strip(row[:n], self.eos_id) for row, n in zip(rows, self.taken.tolist(), strict=True)]
