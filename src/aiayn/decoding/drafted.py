"""Drafted rows: the engine group of speculative decoding (``engine.py``), for the library and the server alike.

Every pass, each row feeds the tokens it has decided but the batch has not yet computed (``pending``) and a draft's
guesses; one pass of the main model scores them all; each row keeps the guesses the main model agrees with (greedy:
its arg-max; sampled: Chen et al.'s rule, ``speculative.py``), then the main model's own next token. Rows of one
batch agree to different lengths, but a batch's cache has one length: the engine keeps the columns every row agreed
to and each row's further decided tokens (already streamed) wait as its ``pending``, fed first in its next pass, so
nothing decided is lost and nothing is computed that a row does not need more than once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from aiayn.decoding.constraint import allowed
from aiayn.decoding.core import Columns, as_eos, strip
from aiayn.decoding.drafts import Draft, DraftLength, Sampler
from aiayn.decoding.greedy import TokenRows
from aiayn.decoding.sampling import Penalties
from aiayn.decoding.speculative import SpeculativeStats, accept_greedy, accept_sampled
from aiayn.model.config import ModelConfig
from aiayn.model.masks import prompt_lengths


class Decided(NamedTuple):
    """A token a drafted row decided: whether its draft guessed it (and the main model agreed), and with
    ``keep_scores`` the scores (V,) it was judged by (forbidden tokens at -inf, penalties applied, as plain decoding's
    ``last_scores``)."""

    id: int
    drafted: bool
    scores: Tensor | None = None


class DraftedRows:
    """Rows decoded speculatively, each with its own copy of ``draft`` (an engine group).

    Args:
        limits: (B,) new tokens allowed per row.
        draft: how guesses are made (``drafts.py``); each row drafts with a copy of it.
        inputs: (B, S) each row's source or right-padded prompt (what its draft begins with).
        sampler: draws as plain sampling would (None: greedy).
        draft_tokens: guesses a pass (None: adapted to each row's acceptance, :class:`DraftLength`).
        on_token: ``on_token(ids (B,), live (B,))`` for each decided token (one row live at a time).
        stats: drafted and accepted tokens are added to it.
        penalties: the rows' penalties and biases (``sampling.Penalties``), at each drafted position as if the
            drafted tokens before it were kept: both acceptance rules judge the scores plain decoding would have.
        constraints: per row, the grammar its tokens follow (``constraint.py``) or None: each drafted position
            masked as the grammar allows it after the guesses before it.
    """

    def __init__(self, limits: Tensor, draft: Draft, inputs: Tensor, cfg: ModelConfig, sampler: Sampler | None = None,
                 draft_tokens: int | None = None, min_new_tokens: int = 0,
                 on_token: Callable[[Tensor, Tensor], None] | None = None,
                 stats: SpeculativeStats | None = None, penalties: Penalties | None = None,
                 constraints: list | None = None) -> None:
        self.cfg, self.sampler, self.min_new_tokens, self.on_token = cfg, sampler, min_new_tokens, on_token
        self.penalties, self.constraints = penalties, constraints
        self.stats = stats if stats is not None else SpeculativeStats()
        self.limits = limits.tolist()
        self.size, self.longest, self.steps = len(self.limits), max(self.limits, default=0), 0
        self.reasons: list[str | None] = ["length" if n <= 0 else None for n in self.limits]
        self.made: list[list[int]] = [[] for _ in self.limits]  # decided tokens (an end id last if it ended)
        self.pending: list[list[int]] = [[] for _ in self.limits]  # decided, not yet in the batch's cache
        self.outbox: list[list[Decided]] = [[] for _ in self.limits]  # decided, not yet taken by new_tokens
        self.keep_scores = False  # whether each decided token keeps its scores (V,) for new_tokens (log-probabilities)
        self.lengths = [DraftLength(draft_tokens) for _ in self.limits]
        self.drafts = [copy.copy(draft) for _ in self.limits]
        self._guess: list[tuple[list[int], Tensor | None, int]] = [([], None, 0)] * self.size
        self._known: list[list[int]] = [[] for _ in self.limits]
        lengths = prompt_lengths(inputs, cfg.pad_id).tolist()
        for row, d, n, limit in zip(inputs.split(1), self.drafts, lengths, self.limits, strict=True):
            d.begin(row[:, :n], limit + DraftLength.MOST + 1)  # (1, S'): its right padding dropped

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.reasons)

    def cancel(self) -> None:
        self.reasons = [r or "cancelled" for r in self.reasons]

    def propose(self, rows: list[Tensor], room: int) -> list[list[int]]:
        """Each row's tokens to feed after its last: its pending tokens, then its draft's guesses, up to ``room`` - 1
        in all. ``rows``: each row's tokens so far (1, t), padding dropped."""
        tails = []
        for i, row in enumerate(rows):
            if self.reasons[i] is not None:
                self._guess[i] = ([], None, 0)
                tails.append([])
                continue
            tokens = torch.cat([row, row.new_tensor([self.pending[i]])], dim=1) if self.pending[i] else row  # (1, t)
            n = min(self.limits[i] - len(self.made[i]), room - 1 - len(self.pending[i]))
            n = min(n, self.lengths[i].next()) if n > 0 else 0
            guess, dists = self.drafts[i].propose(tokens, n, self.sampler) if n > 0 else ([], None)
            self._guess[i] = (guess, dists, tokens.size(1))
            tails.append(self.pending[i] + guess)
        return tails

    def verify(self, scores: Tensor, columns: Columns) -> list[list[int]]:
        """``scores`` (B, L, V) of the pass (column 0: after each row's last token) -> each row's decided tokens
        after its last (pending, agreed guesses, the main model's own; [] for a finished row)."""
        known = []
        self.stats.main_passes += 1
        for i in range(self.size):
            if self.reasons[i] is not None:
                known.append([])
                continue
            guess, dists, fed = self._guess[i]
            p = len(self.pending[i])
            if p >= scores.size(1):  # a plain step (a beam search shares the batch): it feeds a pending token
                known.append(list(self.pending[i]))
                continue
            s, proposal = self._scored(i, scores[i, p: p + len(guess) + 1], guess, columns)
            if s.size(0) == 0:  # its grammar allows no token the vocabulary has: the row ends
                self.reasons[i] = "stop"
                known.append(list(self.pending[i]))
                continue
            dists = None if dists is None else dists[: proposal.numel()]
            kept = (accept_greedy(s, proposal, self.cfg) if self.sampler is None
                    else accept_sampled(s, proposal, dists, self.sampler))
            self.stats.note(guess, kept.tolist())
            if guess:
                self.lengths[i].update(len(guess), kept.numel() - 1)
                self.stats.add(len(guess), kept.numel() - 1)
                self.drafts[i].rollback(fed + kept.numel() - 1)
            known.append(self.pending[i] + self._take(i, as_eos(kept, self.cfg).tolist(), s, kept.numel() - 1))
            self._guess[i] = ([], None, 0)
        self._known = known
        return known

    def _scored(self, i: int, s: Tensor, guess: list[int], columns: Columns) -> tuple[Tensor, Tensor]:
        """Row ``i``'s scores (n + 1, V) after its last token and each guess, as plain decoding would judge them:
        never-generated tokens and early ends forbidden, penalties, and its grammar's mask at each position (its
        matcher fed the guesses, then rolled back). Returns the scores and the guesses (both cut where the grammar
        rejects a guess or allows nothing; no rows: nothing allowed at all)."""
        for j in range(s.size(0)):
            columns.forbid(s[j], len(self.made[i]) + j < self.min_new_tokens)
        if self.penalties is not None:
            s = self.penalties.along(i, s, guess)
        c = None if self.constraints is None else self.constraints[i]
        if c is not None:
            masks, fed = [], 0
            for j in range(s.size(0)):
                masks.append(allowed([c], s.size(1))[0].to(s.device))  # (V,) bool
                if not masks[-1].any():  # a dead end: the guess that led here is not proposed
                    guess, masks = guess[: max(0, j - 1)], masks[: max(0, j - 1) + 1] if j else []
                    break
                if j == len(guess) or not masks[-1][guess[j]]:
                    guess = guess[:j]
                    break
                c.take(guess[j])
                fed += 1
            c.matcher.rollback(fed)
            s = s[: len(masks)].masked_fill(~torch.stack(masks), float("-inf")) if masks else s[:0]
        return s, torch.tensor(guess, dtype=torch.long)

    def _take(self, i: int, kept: list[int], scores: Tensor, guessed: int) -> list[int]:
        """Row ``i`` decides ``kept`` (up to its limit and an end): recorded, streamed; returns those taken. The first
        ``guessed`` were its draft's guesses; ``scores`` (n, V): what each was judged by."""
        kept = kept[: self.limits[i] - len(self.made[i])]
        if self.cfg.eos_id in kept:
            kept = kept[: kept.index(self.cfg.eos_id) + 1]
            self.reasons[i] = "stop"
        c = None if self.constraints is None else self.constraints[i]
        for n, token in enumerate(kept if c is not None else []):
            c.take(token)
            if c.stopped:  # its grammar is complete: the row ends with this token
                kept, self.reasons[i] = kept[: n + 1], "stop"
                break
        self.made[i] += kept
        self.stats.generated += len(kept)
        if self.penalties is not None:
            self.penalties.take_run(i, kept)
        if self.reasons[i] is None and len(self.made[i]) >= self.limits[i]:
            self.reasons[i] = "length"
        for n, token in enumerate(kept):
            if token != self.cfg.eos_id:
                self.outbox[i].append(Decided(token, n < guessed, scores[n] if self.keep_scores else None))
            if self.on_token is not None:
                ids, live = torch.full((self.size,), self.cfg.pad_id), torch.zeros(self.size, dtype=torch.bool)
                ids[i], live[i] = token, token != self.cfg.eos_id
                self.on_token(ids, live)
        return kept

    def commit(self, m: int) -> None:
        """The batch took ``m`` columns of every row's decided tokens; the rest of each waits for the next pass."""
        self.pending = [k[m:] if r is None else [] for k, r in zip(self._known, self.reasons, strict=True)]
        self.steps += 1

    def advance(self, scores: Tensor, columns: Columns) -> tuple[Tensor, None]:
        """A plain step (no row pending or guessing): scores (B, V) -> each row's next token (B,)."""
        known = self.verify(scores[:, None], columns)
        self.commit(1)
        return torch.tensor([k[0] if k else self.cfg.pad_id for k in known]), None

    def new_tokens(self, row: int) -> list[Decided]:
        """Row ``row``'s decided tokens since it was last asked (its end id is no token of the output)."""
        out, self.outbox[row] = self.outbox[row], []
        return out

    def outputs(self) -> list[tuple[list[int], str]]:
        return list(zip(self.results(), [r or "length" for r in self.reasons], strict=True))

    def results(self) -> list[list[int]]:
        return [strip(m, self.cfg.eos_id) for m in self.made]


VERIFY_COLUMNS = 32  # columns a verifying pass may feed in all (each row 1 + pending + guesses)
GUESSING_ROWS = 1  # rows guess only while the running batch has at most this many (see drafted_tails)


def drafted_tails(engine) -> list[list[int]] | None:
    """Each running row's tokens to feed after its last in a verifying pass (``engine.py``), or None for a plain
    step: no group drafts, a beam search shares the batch, or no row has anything pending or a guess. A row's room
    is the cache's and its share of :data:`VERIFY_COLUMNS`. Under load speculation is turned down, as vLLM's
    ``disable_by_batch_size`` does: a batch's cache has one length, so a pass keeps for every row only what all
    agreed to, and a row's further tokens are computed again in its next pass; on a CPU a pass of several rows
    costs about its columns, and rows that each keep their own guesses rarely agree to many (measured: prompt
    lookup at 4 and 8 chat streams, 0.70x and 0.66x of plain). So rows guess only while the batch has at most
    :data:`GUESSING_ROWS`."""
    groups, rows = engine.groups, engine.tokens.size(0)
    drafted = [g for g in groups if isinstance(g, DraftedRows)]
    if not drafted or not all(isinstance(g, DraftedRows | TokenRows) for g in groups):
        return None
    if rows > GUESSING_ROWS and not any(p for g in drafted for p in g.pending):
        return None  # no guess and nothing pending: a plain step, without looking at the rows
    room = min(engine.state.cache.room(), max(2, VERIFY_COLUMNS // rows) if rows <= GUESSING_ROWS else 1)
    left = engine.state.left_pad.tolist() if engine.state.left_pad is not None else [0] * rows
    tails, start = [], 0
    for group in groups:
        if isinstance(group, DraftedRows):
            mine = [engine.tokens[r:r + 1, left[r]:] for r in range(start, start + group.size)]  # each (1, t)
            tails += group.propose(mine, room)
        else:
            tails += [[]] * group.size
        start += group.size
    return tails if any(tails) else None


def verify_pass(engine, tails: list[list[int]]) -> None:
    """One pass of the main model over every row's last token and ``tails``; each group decides its tokens; the
    batch keeps the columns every row decided (``m``), the rest of each row waits as its pending."""
    pad, width = engine.model.config.pad_id, engine.tokens.size(1)
    block = engine.tokens.new_full((len(tails), max(map(len, tails))), pad)  # (B, L - 1)
    for r, tail in enumerate(tails):
        block[r, :len(tail)] = torch.tensor(tail, dtype=block.dtype)
    scores = engine.model.step(torch.cat([engine.tokens, block], dim=1), engine.state).float()  # (B, L, V)
    known, start = [], 0
    for group in engine.groups:
        part = scores[start: start + group.size]
        if isinstance(group, DraftedRows):
            known += group.verify(part, engine.columns)
        else:  # rows of one token a step
            known += [[t] for t in group.advance(part[:, 0], engine.columns)[0].tolist()]
        start += group.size
    m = min([len(k) for k in known if k], default=1)
    engine.state.cache.truncate(width - 1 + m)
    for group in engine.groups:
        if isinstance(group, DraftedRows):
            group.commit(m)
    taken = torch.tensor([(k + [pad] * m)[:m] for k in known], dtype=engine.tokens.dtype)  # (B, m)
    engine.tokens = torch.cat([engine.tokens, taken.to(engine.tokens.device)], dim=1)  # (B, W + m)
    engine.steps += 1
