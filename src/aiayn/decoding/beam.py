"""Beam search, batched over sentences x beams, with GNMT's length penalty (Wu et al., 2016).

A hypothesis of n tokens (its EOS included) with log-probability L scores L / lp(n),
lp(n) = ((5 + n) / 6) ** length_penalty (the paper's alpha). Each step keeps the best ``beam_size`` unfinished
hypotheses per sentence; candidates ending in EOS among the top ``beam_size`` are finished. A sentence is done when it
has ``beam_size`` finished hypotheses or reaches its length limit (then its live beams are finished).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import Columns


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and without the final EOS
    score: float  # log-probability / length penalty
    logprob: float
    stopped: bool = True  # ended with EOS (False: cut at the length limit)


def gnmt_penalty(length: int, length_penalty: float) -> float:
    """GNMT: ((5 + length) / 6) ** length_penalty (the paper's alpha); 0 means raw log-probabilities."""
    return ((5.0 + length) / 6.0) ** length_penalty


class BeamRows:
    """The ``beam_size`` rows of each of B sentences (an engine group): each step keeps the best unfinished
    hypotheses per sentence; candidates ending in EOS among the top ``beam_size`` are finished.

    Args:
        limits: new tokens allowed per sentence (B,).
        min_new_tokens: EOS is not allowed before this many tokens.
    """

    def __init__(self, limits: list[int], beam_size: int, eos_id: int, min_new_tokens: int = 0,
                 length_penalty: float = 1.0) -> None:
        self.limits, self.k, self.eos_id = limits, beam_size, eos_id
        self.min_new_tokens, self.length_penalty = min_new_tokens, length_penalty
        self.size, self.longest, self.steps = len(limits) * beam_size, max(limits, default=0), 0
        self.finished: list[list[Hypothesis]] = [[] for _ in limits]
        self.sentence_done = [limit == 0 for limit in limits]
        self.scores: Tensor | None = None  # (B, K) log-probabilities of the live beams
        self.history: Tensor | None = None  # (B*K, steps) their tokens
        self.cancelled = False

    @property
    def done(self) -> bool:
        return all(self.sentence_done)

    def cancel(self) -> None:
        """Finish every sentence now, with what it has (a client went away)."""
        self.sentence_done, self.cancelled = [True] * len(self.limits), True

    def advance(self, scores: Tensor, columns: Columns) -> tuple[Tensor, Tensor]:
        batch, k, eos = len(self.limits), self.k, self.eos_id
        if self.scores is None:
            self.scores = torch.full((batch, k), float("-inf"), device=scores.device)
            self.scores[:, 0] = 0.0  # all beams start identical: expand only the first
            self.history = torch.zeros(batch * k, 0, dtype=torch.long, device=scores.device)
        logp = columns.forbid(scores.log_softmax(dim=-1), self.steps < self.min_new_tokens)  # (B*K, V) or (B*K, C)
        vocab = logp.size(-1)  # V, or C over a shortlist's candidates
        cand = (self.scores[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)  # (B, K*V)
        cand_scores, cand_idx = cand.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K); fewer when C < 2
        cand_beam, cand_tok = cand_idx // vocab, columns.token_ids(cand_idx % vocab)
        _finish_eos(self.finished, self.sentence_done, cand_scores, cand_beam, cand_tok, self.history, k, eos,
                    self.length_penalty)
        ranks = torch.arange(cand_tok.size(1), device=cand_tok.device)
        keep = ((cand_tok == eos).long() * 2 * k + ranks).argsort(dim=1)[:, :k]  # (B, K)
        kept_tok = cand_tok.gather(1, keep)  # (B, K)
        self.scores = cand_scores.gather(1, keep).masked_fill(kept_tok == eos, float("-inf"))  # EOS never lives on
        offsets = torch.arange(batch, device=cand_beam.device)[:, None] * k
        rows_kept = (cand_beam.gather(1, keep) + offsets).flatten()  # (B*K,)
        self.history = torch.cat([self.history.index_select(0, rows_kept), kept_tok.view(-1, 1)], dim=1)
        self.steps += 1
        for b in range(batch):
            if not self.sentence_done[b] and self.steps >= self.limits[b]:
                _finish_live(self.finished[b], self.history[b * k:(b + 1) * k], self.scores[b], self.length_penalty)
                self.sentence_done[b] = True
        return kept_tok.view(-1), rows_kept

    def nbest(self) -> list[list[Hypothesis]]:
        """Per sentence, its best ``beam_size`` hypotheses, best first."""
        return [sorted(f, key=lambda h: -h.score)[: self.k] for f in self.finished]

    def outputs(self) -> list[tuple[list[int], str]]:
        """Per sentence: its best hypothesis's ids and why it ended (``"stop"``: EOS, ``"length"``: the limit)."""
        return [(best[0].tokens, "stop" if best[0].stopped else "length") if best else
                ([], "cancelled" if self.cancelled else "length") for best in self.nbest()]


def _finish_eos(finished, done, cand_scores, cand_beam, cand_tok, history, k, eos_id, length_penalty) -> None:
    """Move EOS candidates ranked within the top K into their sentence's finished list."""
    for b, r in (cand_tok[:, :k] == eos_id).nonzero().tolist():
        if done[b] or cand_scores[b, r] == float("-inf"):
            continue
        prefix = history[b * k + int(cand_beam[b, r])].tolist()
        logprob = float(cand_scores[b, r])
        finished[b].append(Hypothesis(prefix, logprob / gnmt_penalty(len(prefix) + 1, length_penalty), logprob))
        if len(finished[b]) >= k:
            done[b] = True


def _finish_live(finished: list[Hypothesis], live: Tensor, scores: Tensor, length_penalty: float) -> None:
    """At the length limit, the live beams count as finished (without an EOS)."""
    for row, s in zip(live.tolist(), scores.tolist(), strict=True):
        if s > float("-inf"):
            finished.append(Hypothesis(row, s / gnmt_penalty(len(row), length_penalty), s, stopped=False))
