"""Speculative decoding: a draft proposes a few tokens (``drafts.py``: a smaller model, the model's own
int4 / int8 copy, or prompt lookup), the main model checks them all in one pass and keeps the longest run it
agrees with, plus its own next token (Leviathan et al. 2022, arXiv 2211.17192, §2.3). Greedy, the output is the
main model's own greedy output, token for token; sampled, each drafted token is kept with probability
min(1, p/q) and a rejected one drawn again from what p has beyond q (Chen et al. 2023), so the output is distributed
as plain sampling's. Fewer main-model passes are needed when the draft is good.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import Stepper, as_eos, forbid, strip
from aiayn.decoding.drafts import Draft, DraftLength, ModelDraft, Sampler
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


def speculative_greedy(model: TransformerModel, draft: Draft | TransformerModel, src_ids: Tensor,
                       max_new_tokens: Tensor | int, k: int | None = None, min_new_tokens: int = 0,
                       stats: SpeculativeStats | None = None,
                       on_token: Callable[[Tensor, Tensor], None] | None = None
                       ) -> tuple[list[list[int]], SpeculativeStats]:
    """Greedy outputs of ``model`` for each row of ``src_ids``, drafted by ``draft``: :func:`speculative`."""
    return speculative(model, draft, src_ids, max_new_tokens, k, min_new_tokens, stats, on_token)


@torch.no_grad()
def speculative(model: TransformerModel, draft: Draft | TransformerModel, src_ids: Tensor,
                max_new_tokens: Tensor | int, k: int | None = None, min_new_tokens: int = 0,
                stats: SpeculativeStats | None = None, on_token: Callable[[Tensor, Tensor], None] | None = None,
                sampler: Sampler | None = None) -> tuple[list[list[int]], SpeculativeStats]:
    """Outputs of ``model`` for each row of ``src_ids`` (one row at a time), drafted by ``draft`` (a
    :class:`~aiayn.decoding.drafts.Draft`, or a model with the same vocabulary: a
    :class:`~aiayn.decoding.drafts.ModelDraft`), ``k`` tokens a pass (None: adapted to the acceptance,
    :class:`~aiayn.decoding.drafts.DraftLength`): greedy, or drawn as ``sampler`` says (speculative sampling: each
    token distributed as plain sampling's).

    ``max_new_tokens`` may be a (B,) tensor of per-row limits; ``stats`` (if given) is added to and returned;
    ``on_token(ids (1,), live (1,))`` is called with each token as it is kept (streaming).
    """
    if isinstance(draft, TransformerModel):
        if draft.config.target_vocab != model.config.target_vocab:
            raise ValueError("draft model: its vocabulary must be the main model's")
        draft = ModelDraft(draft)
    stats, outputs = stats or SpeculativeStats(), []
    limits = torch.as_tensor(max_new_tokens).expand(src_ids.size(0)).tolist()
    lengths = prompt_lengths(src_ids, model.config.pad_id).tolist()  # (B,): a lone row is all real
    for row, limit, length in zip(src_ids.split(1), limits, lengths, strict=True):
        row = row[:, :length]  # (1, S'): its right padding dropped
        if limit > 0:
            outputs.append(_one(model, draft, row, int(limit), DraftLength(k), min_new_tokens, stats, on_token,
                                sampler))
        else:
            outputs.append([])
    return outputs, stats


def _one(model, draft: Draft, src: Tensor, limit: int, length: DraftLength, min_new: int, stats: SpeculativeStats,
         on_token, sampler: Sampler | None) -> list[int]:
    """One row: draft, verify in one pass, keep the agreed run and the main model's own next token, roll back."""
    cfg = model.config
    main = Stepper(model, src, limit + length.most + 1)
    draft.begin(src, limit + length.most + 1)
    tokens = main.start_tokens  # (1, t0)
    start = tokens.size(1)
    while tokens.size(1) - start < limit:
        made = tokens.size(1) - start
        drafted, dists = draft.propose(tokens, min(length.next(), limit - made), sampler)
        proposal = tokens.new_tensor([drafted])  # (1, n)
        scores = main.score_new(torch.cat([tokens, proposal], dim=1))[0, -(proposal.size(1) + 1):].float()
        no_eos = torch.arange(made, made + proposal.size(1) + 1) < min_new  # (n + 1,)
        for j in range(scores.size(0)):
            forbid(scores[j], cfg, bool(no_eos[j]))
        kept = _greedy(scores, proposal[0], cfg) if sampler is None else _sampled(scores, proposal[0], dists, sampler)
        agree = kept.numel() - 1  # the drafted tokens kept, then the main model's own (agree + 1,)
        kept = as_eos(kept, cfg)
        length.update(proposal.size(1), agree)
        stats.proposed, stats.accepted, stats.main_passes = (stats.proposed + proposal.size(1),
                                                             stats.accepted + agree, stats.main_passes + 1)
        tokens = torch.cat([tokens, kept[None]], dim=1)
        main.cache.truncate(tokens.size(1) - 1)
        draft.rollback(tokens.size(1) - 1)
        ended = _stream(kept, made, limit, cfg.eos_id, on_token)
        if ended:
            break
    out = strip(tokens[0, start: start + limit].tolist(), cfg.eos_id)
    stats.generated += min(tokens.size(1) - start, limit)
    return out


def _greedy(scores: Tensor, proposal: Tensor, cfg) -> Tensor:
    """The drafted run the main model's arg-max agrees with, then its own next token: (agree + 1,) ids."""
    best = as_eos(scores.argmax(dim=-1), cfg)  # (n + 1,): the main model's choice after each drafted prefix
    agree = int((best[:-1] == as_eos(proposal, cfg)).long().cumprod(0).sum())
    return torch.cat([proposal[:agree], best[agree:agree + 1]])


def _sampled(scores: Tensor, proposal: Tensor, dists: Tensor | None, sampler: Sampler) -> Tensor:
    """Speculative sampling's rule (Chen et al. 2023, Algorithm 2): drafted token x, drawn from q, is kept with
    probability min(1, p(x) / q(x)); at the first one rejected the token is drawn from max(p - q, 0) normalised;
    when all are kept, the next from p. Each token kept is distributed as the main model's sampling would draw it.
    ``dists`` None: each drafted token was a certainty (q one-hot: kept with probability p(x))."""
    p = sampler.probs(scores)  # (n + 1, V)
    for i, x in enumerate(proposal.tolist()):
        q = dists[i] if dists is not None else torch.zeros_like(p[i]).index_fill_(0, proposal[i:i + 1], 1.0)
        ratio = float(p[i, x] / q[x]) if q[x] > 0 else 0.0
        if torch.rand((), generator=sampler.generator) >= ratio:  # rejected: draw from what p has beyond q
            left = (p[i] - q).clamp_min(0)  # (V,)
            fix = sampler.draw(left / left.sum()) if left.sum() > 0 else sampler.draw(p[i])
            return torch.cat([proposal[:i], proposal.new_tensor([fix])])
    return torch.cat([proposal, proposal.new_tensor([sampler.draw(p[-1])])])


def _stream(kept: Tensor, made: int, limit: int, eos: int, on_token) -> bool:
    """Hand each kept token to ``on_token`` up to the limit and an EOS; whether the row ended at an EOS."""
    for i, token in enumerate(kept.tolist()):
        if made + i >= limit:
            return False
        if on_token is not None:
            on_token(torch.tensor([token]), torch.tensor([token != eos]))
        if token == eos:
            return True
    return False
