"""Speculative decoding (greedy): a small draft model proposes k tokens, the main model checks them all in
one parallel pass and keeps the longest run it agrees with, plus its own next token. The output is the
main model's own greedy output, token for token; fewer main-model passes are needed when the draft is good.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import Stepper, as_eos, forbid, strip
from aiayn.model.masks import prompt_lengths
from aiayn.model.transformer import TransformerModel


@dataclass
class SpeculativeStats:
    proposed: int = 0
    accepted: int = 0
    main_passes: int = 0

    generated: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Share of drafted tokens the main model agreed with."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_main_pass(self) -> float:
        """Tokens gained per main-model pass (plain greedy gains exactly 1)."""
        return self.generated / self.main_passes if self.main_passes else 0.0

    def summary(self) -> str:
        return (f"speculative decoding: {self.accepted:,} of {self.proposed:,} drafted tokens accepted "
                f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_main_pass:.2f} tokens per main-model pass")


@torch.no_grad()
def speculative_greedy(model: TransformerModel, draft: TransformerModel, src_ids: Tensor,
                       max_new_tokens: Tensor | int, k: int = 4, min_new_tokens: int = 0,
                       stats: SpeculativeStats | None = None) -> tuple[list[list[int]], SpeculativeStats]:
    """Greedy outputs of ``model`` for each row of ``src_ids`` (one row at a time), drafted by ``draft``.

    ``max_new_tokens`` may be a (B,) tensor of per-row limits; ``stats`` (if given) is added to and returned.
    """
    if draft.config.target_vocab != model.config.target_vocab:
        raise ValueError("draft model: its vocabulary must be the main model's")
    stats, outputs = stats or SpeculativeStats(), []
    limits = torch.as_tensor(max_new_tokens).expand(src_ids.size(0)).tolist()
    lengths = prompt_lengths(src_ids, model.config.pad_id).tolist()  # (B,): a lone row is all real
    for row, limit, length in zip(src_ids.split(1), limits, lengths, strict=True):
        row = row[:, :length]  # (1, S'): its right padding dropped
        outputs.append(_one(model, draft, row, int(limit), k, min_new_tokens, stats) if limit > 0 else [])
    return outputs, stats


def _one(model, draft, src: Tensor, limit: int, k: int, min_new: int, stats: SpeculativeStats) -> list[int]:
    cfg = model.config
    main = Stepper(model, src, limit + k + 1)
    small = Stepper(draft, src, limit + k + 1)
    tokens = main.start_tokens  # (1, t0)
    start = tokens.size(1)
    while tokens.size(1) - start < limit:
        proposal = _propose(small, tokens, min(k, limit - (tokens.size(1) - start)), start, min_new, cfg)
        drafted = torch.cat([tokens, proposal], dim=1)  # (1, t + n)
        n_new = drafted.size(1) - start
        scores = main.score_new(drafted)[0, -(proposal.size(1) + 1):].float()  # (n + 1, V)
        no_eos = torch.arange(tokens.size(1) - start, n_new + 1) < min_new
        for j in range(scores.size(0)):
            forbid(scores[j], cfg, bool(no_eos[j]))
        best = as_eos(scores.argmax(dim=-1), cfg)  # main model's choice after each drafted prefix
        agree = int((best[:-1] == proposal[0]).long().cumprod(0).sum())
        stats.proposed, stats.accepted, stats.main_passes = (stats.proposed + proposal.size(1),
                                                             stats.accepted + agree, stats.main_passes + 1)
        tokens = torch.cat([tokens, proposal[:, :agree], best[agree].view(1, 1)], dim=1)
        main.cache.truncate(tokens.size(1) - 1)
        small.cache.truncate(tokens.size(1) - 1)
        if cfg.eos_id in tokens[0, start:].tolist():
            break
    out = strip(tokens[0, start: start + limit].tolist(), cfg.eos_id)
    stats.generated += min(tokens.size(1) - start, limit)
    return out


def _propose(small: Stepper, tokens: Tensor, n: int, start: int, min_new: int, cfg) -> Tensor:
    """Up to ``n`` greedy draft tokens (1, n'), stopping after an EOS."""
    proposal = tokens.new_empty(1, 0)
    for _ in range(n):
        position = tokens.size(1) + proposal.size(1) - start
        logits = forbid(small(torch.cat([tokens, proposal], dim=1)).float(), cfg, position < min_new)
        nxt = as_eos(logits.argmax(dim=-1, keepdim=True), cfg)  # (1, 1)
        proposal = torch.cat([proposal, nxt], dim=1)
        if int(nxt) == cfg.eos_id:
            break
    return proposal
