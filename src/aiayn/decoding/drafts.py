"""Where speculative decoding's drafts come from: a draft guesses a row's next tokens cheaply, and the main model
checks them all in one pass (``speculative.py``), so what a draft proposes changes the speed, never the output.

- :class:`ModelDraft`: a smaller model with the same vocabulary decodes greedily ahead (Leviathan et al. 2022,
  arXiv 2211.17192), or the main model's own int4 / int8 copy (self-speculation: no second download, the same
  tokenizer by construction, the copy's memory besides: ``aiayn.inference.precision.draft_copy``).
- :class:`NGramDraft`: prompt lookup (Saxena 2023; llama.cpp's and vLLM's n-gram drafts): the tokens that followed
  the latest earlier occurrence of the row's last few tokens, in the prompt or the output: no second model.
- :class:`ProphetDraft`: a non-autoregressive translator (CTC or CMLM) drafts the whole target in one pass, the
  specification's "prophet" that guides the autoregressive model (Xia et al. 2023, arXiv 2203.16487).
- :class:`DraftLength`: how many tokens to draft, from the acceptance measured so far (none while it does not pay).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from aiayn.decoding.core import Stepper, as_eos, forbid
from aiayn.decoding.ctc import best_path
from aiayn.decoding.mask_predict import mask_predict
from aiayn.decoding.sampling import filter_logits
from aiayn.model.nonautoregressive import CTC, NonAutoregressive
from aiayn.model.transformer import TransformerModel


@dataclass
class Sampler:
    """Sampling as speculative sampling does it (Chen et al. 2023, arXiv 2302.01318): the filtered distribution of
    scores (temperature, top-k, top-p, min-p: ``sampling.filter_logits``) and the draws, from one generator.
    ``pad_last``: the last column is a padding row aiayn appended, never drawn."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    pad_last: bool = False
    generator: torch.Generator = field(default_factory=torch.Generator)

    def probs(self, scores: Tensor) -> Tensor:
        """(n, V) scores -> (n, V) probabilities."""
        if self.pad_last:
            scores = scores.clone()
            scores[:, -1] = float("-inf")
        return filter_logits(scores, self.temperature, self.top_k, self.top_p, self.min_p).softmax(dim=-1)

    def draw(self, probs: Tensor) -> int:
        """One token of a (V,) distribution."""
        return int(torch.multinomial(probs, 1, generator=self.generator))


class Draft(Protocol):
    """A way to draft: ``begin`` a row, ``propose`` up to ``n`` tokens after its tokens so far (1, t): the ids and,
    when the draft samples (``sampler``), the distribution each was drawn from, (n', V) (None: each a certainty,
    as a lookup's are), and ``rollback`` to a length when the main model rejected what came after."""

    def begin(self, inputs: Tensor, room: int) -> None: ...  # a row's source or prompt (1, S); room: new tokens

    def propose(self, tokens: Tensor, n: int, sampler: Sampler | None = None) -> tuple[list[int], Tensor | None]: ...

    def rollback(self, length: int) -> None: ...


class ModelDraft:
    """A model with the main model's vocabulary, decoding greedily ahead with its own cache."""

    def __init__(self, model: TransformerModel) -> None:
        self.model, self.stepper = model.eval(), None

    def begin(self, inputs: Tensor, room: int) -> None:
        self.stepper = Stepper(self.model, inputs, room)

    def propose(self, tokens: Tensor, n: int, sampler: Sampler | None = None) -> tuple[list[int], Tensor | None]:
        cfg, out, dists = self.model.config, [], []
        for _ in range(n):
            ids = torch.cat([tokens, tokens.new_tensor([out])], dim=1) if out else tokens  # (1, t + drafted)
            logits = forbid(self.stepper(ids).float(), cfg, False)  # (1, V)
            if sampler is None:
                out.append(int(as_eos(logits.argmax(dim=-1), cfg)))
            else:  # the id as drawn (an end-of-turn id too), judged against its own probability
                dists.append(sampler.probs(logits)[0])  # (V,)
                out.append(sampler.draw(dists[-1]))
            if out[-1] == cfg.eos_id or out[-1] in cfg.stop_ids:
                break
        return out, torch.stack(dists) if dists else None

    def rollback(self, length: int) -> None:
        self.stepper.cache.truncate(length)


class NGramDraft:
    """Prompt lookup: for n from ``max_ngram`` down to ``min_ngram``, the row's last n tokens are looked for
    earlier in the row (prompt and output); the tokens after their latest earlier occurrence are the draft."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram draft: need 1 <= min_ngram <= max_ngram, not {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def begin(self, inputs: Tensor, room: int) -> None:
        pass

    def propose(self, tokens: Tensor, n: int, sampler: Sampler | None = None) -> tuple[list[int], None]:
        row = tokens[0]  # (t,)
        for size in range(self.max_ngram, self.min_ngram - 1, -1):
            if row.numel() <= size or n <= 0:
                continue
            windows = row[:-1].unfold(0, size, 1)  # (t - size, size): every earlier n-gram, not the tail itself
            hits = (windows == row[-size:]).all(dim=1).nonzero()  # (h, 1)
            if hits.numel():
                after = int(hits[-1]) + size  # the latest occurrence's next position
                return row[after: after + n].tolist(), None
        return [], None

    def rollback(self, length: int) -> None:
        pass


class ProphetDraft:
    """A non-autoregressive model's whole translation of the source, made in one pass (a CTC model's best path, a
    CMLM's mask-predict) before the first token: the autoregressive model verifies it a few tokens at a time. Where
    the output has left the prophecy (a rejection), the draft goes on after the place in it where the output's last
    tokens occur nearest the output's own length (prompt lookup over the prophecy)."""

    def __init__(self, model: NonAutoregressive, most_ngram: int = 3) -> None:
        self.model, self.most_ngram = model.eval(), most_ngram
        self.target: list[int] = []

    def begin(self, inputs: Tensor, room: int) -> None:
        limit = torch.tensor([room])
        if isinstance(self.model, CTC):
            self.target = best_path(self.model, inputs, limit)[0]
        else:
            self.target = mask_predict(self.model, inputs, max_new_tokens=limit)[0]

    def propose(self, tokens: Tensor, n: int, sampler: Sampler | None = None) -> tuple[list[int], None]:
        made, target = tokens[0, 1:].tolist(), self.target  # after the decoder's one start token (BOS)
        if target[: len(made)] == made:  # still on the prophecy
            return target[len(made): len(made) + n], None
        for size in range(min(self.most_ngram, len(made)), 0, -1):
            tail = made[-size:]
            hits = [i + size for i in range(len(target) - size + 1) if target[i: i + size] == tail]
            if hits:
                after = min(hits, key=lambda i: abs(i - len(made)))  # the occurrence nearest the output's place
                return target[after: after + n], None
        return [], None

    def rollback(self, length: int) -> None:
        pass


class DraftLength:
    """Tokens to draft in the next pass: ``fixed`` if given; else adapted to the acceptance measured so far:
    grows by 2 while every drafted token is accepted, shrinks by 1 at a rejection (Hugging Face's heuristic
    schedule), within [1, ``MOST``]; and after ``PATIENCE`` passes in a row that kept less than ``PAYS`` of what
    they drafted, none for a while (4 passes, doubling each time up to 64), since a pass that verifies k + 1
    tokens costs more than one that makes one: a draft that keeps being wrong costs little."""

    FIRST, MOST, PAYS, PATIENCE = 4, 16, 0.3, 4

    def __init__(self, fixed: int | None = None) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError(f"draft_tokens: {fixed} is not a positive number of tokens")
        self.fixed, self.k = fixed, fixed or self.FIRST
        self.most = fixed or self.MOST
        self.poor = self.resting = 0
        self.rest = 4

    def next(self) -> int:
        """How many to draft now (0: a plain step)."""
        if self.resting:
            self.resting -= 1
            return 0
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        """What the last pass drafted and how many of those the main model accepted."""
        if drafted == 0 or self.fixed:
            return
        self.k = min(self.MOST, self.k + 2) if accepted == drafted else max(1, self.k - 1)
        self.poor = self.poor + 1 if accepted < self.PAYS * drafted else 0
        if self.poor >= self.PATIENCE:
            self.resting, self.rest, self.poor = self.rest, min(64, 2 * self.rest), 0
        elif accepted == drafted:
            self.rest = 4
