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

from aiayn.decoding.core import Stepper
from aiayn.model.transformer import TransformerModel


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and without the final EOS
    score: float  # log-probability / length penalty
    logprob: float


def gnmt_penalty(length: int, length_penalty: float) -> float:
    """GNMT: ((5 + length) / 6) ** length_penalty (the paper's alpha); 0 means raw log-probabilities."""
    return ((5.0 + length) / 6.0) ** length_penalty


@torch.no_grad()
def beam_search(model: TransformerModel, src_ids: Tensor, beam_size: int = 4, max_new_tokens: Tensor | int = 64,
                min_new_tokens: int = 0, length_penalty: float = 1.0, use_cache: bool = True,
                candidates: Tensor | None = None) -> list[list[Hypothesis]]:
    """n-best lists (best first, ``beam_size`` each) for every row of ``src_ids``.

    ``max_new_tokens`` may be a (B,) tensor of per-sentence limits; ``candidates`` (C,): the only ids that
    may be generated (a shortlist; log-probabilities are then normalised over them).
    """
    cfg, batch, k = model.config, src_ids.size(0), beam_size
    limits = torch.as_tensor(max_new_tokens).expand(batch).tolist()
    step = Stepper(model, src_ids, max(limits), use_cache, beams=k, candidates=candidates)
    tokens = step.start_tokens  # (B*K, t0)
    start = tokens.size(1)
    scores = torch.full((batch, k), float("-inf"), device=src_ids.device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [limit == 0 for limit in limits]
    for t in range(max(limits)):
        logp = step.forbid(step(tokens).float().log_softmax(dim=-1), t < min_new_tokens)  # (B*K, V) or (B*K, C)
        vocab = logp.size(-1)  # V, or C over a shortlist's candidates
        cand = (scores[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)  # (B, K*V)
        cand_scores, cand_idx = cand.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K); fewer when C < 2
        cand_beam, cand_tok = cand_idx // vocab, step.token_ids(cand_idx % vocab)
        _finish_eos(finished, done, cand_scores, cand_beam, cand_tok, tokens, start, k, cfg.eos_id, length_penalty)
        ranks = torch.arange(cand_tok.size(1), device=cand_tok.device)
        keep = ((cand_tok == cfg.eos_id).long() * 2 * k + ranks).argsort(dim=1)[:, :k]  # (B, K)
        kept_tok = cand_tok.gather(1, keep)  # (B, K)
        scores = cand_scores.gather(1, keep).masked_fill(kept_tok == cfg.eos_id, float("-inf"))  # EOS never lives on
        offsets = torch.arange(batch, device=cand_beam.device)[:, None] * k
        rows_kept = (cand_beam.gather(1, keep) + offsets).flatten()  # (B*K,)
        tokens = torch.cat([tokens.index_select(0, rows_kept), kept_tok.view(-1, 1)], dim=1)
        step.reorder(rows_kept, within_groups=True)  # beams never leave their sentence
        for b in range(batch):
            if not done[b] and t + 1 >= limits[b]:
                _finish_live(finished[b], tokens[b * k:(b + 1) * k, start:], scores[b], length_penalty)
                done[b] = True
        if all(done):
            break
    return [sorted(f, key=lambda h: -h.score)[:k] for f in finished]


def _finish_eos(finished, done, cand_scores, cand_beam, cand_tok, tokens, start, k, eos_id, length_penalty) -> None:
    """Move EOS candidates ranked within the top K into their sentence's finished list."""
    for b, r in (cand_tok[:, :k] == eos_id).nonzero().tolist():
        if done[b] or cand_scores[b, r] == float("-inf"):
            continue
        prefix = tokens[b * k + int(cand_beam[b, r]), start:].tolist()
        logprob = float(cand_scores[b, r])
        finished[b].append(Hypothesis(prefix, logprob / gnmt_penalty(len(prefix) + 1, length_penalty), logprob))
        if len(finished[b]) >= k:
            done[b] = True


def _finish_live(finished: list[Hypothesis], live: Tensor, scores: Tensor, length_penalty: float) -> None:
    """At the length limit, the live beams count as finished (without an EOS)."""
    for row, s in zip(live.tolist(), scores.tolist(), strict=True):
        if s > float("-inf"):
            finished.append(Hypothesis(row, s / gnmt_penalty(len(row), length_penalty), s))
