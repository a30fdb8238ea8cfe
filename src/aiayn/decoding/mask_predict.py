"""Mask-Predict (Ghazvininejad et al., 2019): non-autoregressive translation by iterative refinement over a
conditional masked language model (``aiayn.model.nonautoregressive.CMLM``).

Start from targets that are all ``<mask>``, of the predicted length, and predict every position at once. Then,
for iteration t = 1..T-1, re-mask the n = floor(L * (T - t) / T) tokens of lowest probability and predict only
those again; the others keep their tokens and probabilities. Among equal probabilities the earlier position is
re-masked first. Length beam l: the l likeliest lengths are decoded side by side, and the candidate with the
highest average log-probability is kept. T = 1 is a single parallel pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import forbid
from aiayn.model.masks import padding_mask
from aiayn.model.nonautoregressive import CMLM


@dataclass(frozen=True)
class Iteration:
    """One iteration of one sentence's kept candidate (for pictures): the tokens after it, their probabilities,
    and which positions it predicted (all at the first; the re-masked ones after)."""

    tokens: list[int]
    probabilities: list[float]
    predicted: list[bool]


@torch.no_grad()
def mask_predict(model: CMLM, src_ids: Tensor, iterations: int = 10, length_beam: int = 5,
                 max_new_tokens: Tensor | None = None, history: list[list[Iteration]] | None = None) -> list[list[int]]:
    """The translation of each row of ``src_ids`` (B, S), right-padded.

    Args:
        iterations: T, the number of parallel passes; length_beam: l, the lengths tried per sentence.
        max_new_tokens: (B,) the longest translation allowed per row (predicted lengths are cut to it).
        history: if given, filled with one list of :class:`Iteration` per sentence.
    """
    if not isinstance(model, CMLM):
        raise ValueError("strategy mask-predict: needs a CMLM checkpoint (aiayn train --task cmlm)")
    cfg, batch = model.config, src_ids.size(0)
    src_mask = padding_mask(src_ids, cfg.pad_id)  # (B, S)
    memory = model.encode(src_ids)  # (B, S, D)
    lengths = model.predicted_lengths(memory, src_mask, length_beam)  # (B, l)
    if max_new_tokens is not None:
        lengths = torch.minimum(lengths, max_new_tokens.clamp(min=1)[:, None])
    beam = lengths.size(1)
    lengths = lengths.flatten()  # (N,) = (B*l,)
    memory, src_mask = memory.repeat_interleave(beam, dim=0), src_mask.repeat_interleave(beam, dim=0)
    real = torch.arange(int(lengths.max()), device=src_ids.device) < lengths[:, None]  # (N, W)
    tokens = torch.full(real.shape, cfg.mask_id, device=src_ids.device).masked_fill(~real, cfg.pad_id)
    logp, predicted, steps = torch.zeros(real.shape, device=src_ids.device), real, []  # steps: kept if asked
    for t in range(iterations):
        if t:
            predicted = lowest(logp, real, lengths * (iterations - t) // iterations)  # (N, W)
            tokens = tokens.masked_fill(predicted, cfg.mask_id)
        best, ids = _predict(model, tokens, memory, src_mask)  # (N, W) each
        tokens, logp = torch.where(predicted, ids, tokens), torch.where(predicted, best, logp)
        if history is not None:
            steps.append((tokens, logp, predicted))
    average = (logp * real).sum(dim=1) / lengths  # (N,)
    kept = torch.arange(batch, device=src_ids.device) * beam + average.view(batch, beam).argmax(dim=1)  # (B,)
    if history is not None:
        history.extend(_history(steps, kept, lengths))
    return [tokens[r, : int(lengths[r])].tolist() for r in kept.tolist()]


def lowest(logp: Tensor, real: Tensor, n: Tensor) -> Tensor:
    """(N, W) bool: the ``n[i]`` real positions of row i with the lowest log-probability (ties: the earlier)."""
    order = logp.masked_fill(~real, float("inf")).sort(dim=1, stable=True).indices  # ascending
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(order.size(1), device=order.device)
                                             .expand_as(order))  # (N, W): each position's rank
    return (ranks < n[:, None]) & real


def _predict(model: CMLM, tokens: Tensor, memory: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
    """The likeliest token at every position and its log-probability, (N, W) each; special tokens (PAD, BOS,
    EOS, <mask>) are never predicted."""
    scores = model.decode_all(tokens, memory, src_mask).float().log_softmax(dim=-1)  # (N, W, V)
    scores = forbid(scores, model.config, no_eos=True)
    scores[..., model.config.mask_id] = float("-inf")
    best, ids = scores.max(dim=-1)
    return best, ids


def _history(steps, kept: Tensor, lengths: Tensor) -> list[list[Iteration]]:
    out = []
    for r in kept.tolist():
        n = int(lengths[r])
        out.append([Iteration(t[r, :n].tolist(), p[r, :n].exp().tolist(), m[r, :n].tolist()) for t, p, m in steps])
    return out
