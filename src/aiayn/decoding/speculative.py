"""Speculative decoding: a draft proposes a few tokens (``drafts.py``: a smaller model, the model's own
int4 / int8 copy, or prompt lookup), the main model checks them all in one pass and keeps the longest run it
agrees with, plus its own next token (Leviathan et al. 2022, arXiv 2211.17192, §2.3). Greedy, the output is the
main model's own greedy output, token for token; sampled, each drafted token is kept with probability
min(1, p/q) and a rejected one drawn again from what p has beyond q (Chen et al. 2023), so the output is distributed
as plain sampling's. Fewer main-model passes are needed when the draft is good.

Here are the two acceptance rules and the counts; the rows that use them, in the library and the server alike, are
``drafted.py``'s (an engine group).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import as_eos
from aiayn.decoding.drafts import Sampler


@dataclass
class SpeculativeStats:
    """Drafted (``proposed``) and ``accepted`` tokens, passes of the main model, tokens decided; with ``passes`` a
    list, each row's pass is noted in it as (its guesses, what it kept: the agreed guesses, then the main model's own
    token), e.g. for ``aiayn show drafts``."""

    proposed: int = 0
    accepted: int = 0
    main_passes: int = 0
    generated: int = 0
    passes: list[tuple[list[int], list[int]]] | None = None

    @property
    def acceptance_rate(self) -> float:
        """Share of drafted tokens the main model agreed with."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_main_pass(self) -> float:
        """Tokens gained per main-model pass (plain greedy gains exactly 1)."""
        return self.generated / self.main_passes if self.main_passes else 0.0

    def add(self, proposed: int, accepted: int) -> None:
        """One row's pass: ``proposed`` guesses, ``accepted`` of them kept."""
        self.proposed, self.accepted = self.proposed + proposed, self.accepted + accepted

    def note(self, guess: list[int], kept: list[int]) -> None:
        """One row's pass, kept in ``passes`` when it is a list."""
        if self.passes is not None:
            self.passes.append((list(guess), list(kept)))

    def summary(self) -> str:
        return (f"speculative decoding: {self.accepted:,} of {self.proposed:,} drafted tokens accepted "
                f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_main_pass:.2f} tokens per main-model pass")


def accept_greedy(scores: Tensor, proposal: Tensor, cfg) -> Tensor:
    """The drafted run the main model's arg-max agrees with, then its own next token: (agree + 1,) ids."""
    best = as_eos(scores.argmax(dim=-1), cfg)  # (n + 1,): the main model's choice after each drafted prefix
    agree = int((best[:-1] == as_eos(proposal, cfg)).long().cumprod(0).sum())
    return torch.cat([proposal[:agree], best[agree:agree + 1]])


def accept_sampled(scores: Tensor, proposal: Tensor, dists: Tensor | None, sampler: Sampler) -> Tensor:
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
