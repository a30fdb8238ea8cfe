"""What the scheduler's one queue holds (``serve/scheduler.py``): decode jobs, translation and generation alike
(engine groups, built by :func:`aiayn.decoding.generation.rows_for`), encoder-only work, and chores; and the
scheduler's typed refusal."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.constraint import Grammar
from aiayn.decoding.drafted import DraftedRows
from aiayn.decoding.drafts import Draft
from aiayn.decoding.generation import rows_for
from aiayn.decoding.greedy import TokenRows
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.model.transformer import TransformerModel


@dataclass(frozen=True)
class Refusal:
    """Why the scheduler will not take a job (:meth:`Scheduler.admission <aiayn.serve.scheduler.Scheduler.admission>`):
    ``kind`` ``"invalid"`` (a decoding the model cannot run), ``"too_long"`` (a length over the context or a
    decoding limit: max_new_tokens, beam_size) or ``"busy"`` (too many requests open); ``field``: the request field at
    fault. Each protocol maps it to its own status code (the native routes 422/422/429, ``/v1`` OpenAI's 400/400/429).
    Sizes (texts, characters, bytes) never reach the scheduler: ``Limits.oversize``, 413 on every route."""

    kind: str
    field: str
    message: str


class Refused(Exception):
    """A job the scheduler did not take; ``refusal`` says why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True)
class Token:
    """An engine event: one token of a greedy or sampled row; with ``logprobs`` asked, its log-probability under the
    model (before temperature and filtering) and the ``top`` likeliest ``(id, logprob)``."""

    id: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None
    drafted: bool = False  # a draft guessed it and the model agreed (speculative decoding)


@dataclass(frozen=True)
class Finished:
    """An engine event: a job's end, why (``stop`` | ``length`` | ``cancelled`` | ``error``, the row group's), its
    output ids and counts; ``detail``: what went wrong, for an ``error``."""

    finish_reason: str
    ids: list[int]
    prompt_tokens: int
    completion_tokens: int
    detail: str | None = None

    def counts(self) -> dict:
        """The finish reason and the token counts, as the native routes answer them."""
        return {"finish_reason": self.finish_reason, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


Event = Token | Finished


def _ignore(_event: Event) -> None:
    pass


@dataclass
class DecodeJob:
    """One input to decode, translation and generation alike: ``inputs`` (a source's or a prompt's ids) with
    ``decoding`` (resolved against the model when the scheduler admits the job) and where results go:
    ``emit(event)``, called on the decoding thread with a :class:`Token` per token of a greedy or sampled row
    (with ``logprobs``, a number of alternatives, its log-probability and the likeliest), then once a
    :class:`Finished`: the reason is the rows group's (the row that ended it). ``grammar``: a compiled
    grammar the output follows (``decoding/constraint.py``); ``adapter``: the LoRA adapter its rows run (0: the
    base model; ``model/multi_lora.py``)."""

    inputs: list[int]
    decoding: DecodingConfig
    emit: Callable[[Event], None] = _ignore
    logprobs: int | None = None
    grammar: Grammar | None = None
    adapter: int = 0
    generated: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)  # time.perf_counter() as each token came
    submitted_at: float = 0.0
    cancelled: bool = False
    finish_reason: str | None = None
    cached_tokens: int = 0  # prompt tokens the prefix cache served (set when the scheduler admits the job)
    drafted: bool = False  # decoded speculatively (set when its group is made)

    @property
    def prompt(self) -> list[int]:
        return self.inputs

    def group(self, model: TransformerModel, draft: Draft | None = None, draft_tokens: int | None = None,
              stats: SpeculativeStats | None = None):
        """The engine group, its inputs (1, T) and beams: as ``aiayn.generate`` decodes this input alone; with a
        ``draft``, drafted (``decoding/drafted.py``) where the decoding can be."""
        made = rows_for(model, torch.tensor([self.inputs]), self.decoding, grammar=self.grammar, draft=draft,
                        draft_tokens=draft_tokens, stats=stats)
        if isinstance(made[0], DraftedRows):
            made[0].keep_scores, self.drafted = self.logprobs is not None, True
        return made

    def after_step(self, group) -> None:
        """Record and emit this step's tokens of a greedy or sampled row (its end id is no token of the output):
        one, or a drafted row's several."""
        if isinstance(group, DraftedRows):
            for token in group.new_tokens(0):
                self._took(token.id, token.scores, token.drafted)
            return
        if not isinstance(group, TokenRows) or not bool(group.live[0]):
            return
        token = int(group.generated[-1][0])
        if token != group.eos_id:
            self._took(token, group.last_scores[0])

    def _took(self, token: int, scores: Tensor | None, drafted: bool = False) -> None:
        self.generated.append(token)
        self.token_times.append(time.perf_counter())
        if self.logprobs is None:
            self.emit(Token(token, drafted=drafted))
        else:
            self.emit(Token(token, *_logprobs(scores, token, self.logprobs), drafted=drafted))

    def finish(self, ids: list[int], reason: str) -> None:
        """The job's end: its output ids and why it ended."""
        self.generated, self.finish_reason = list(ids), reason
        self.emit(Finished(reason, self.generated, len(self.inputs), len(self.generated)))

    def fail(self, err: Exception) -> None:
        self.finish_reason = "error"
        self.emit(Finished("error", self.generated, len(self.inputs), len(self.generated),
                           f"{type(err).__name__}: {err}"))


def _logprobs(scores: Tensor, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The token's log-probability under ``scores`` (V,) and the ``top`` likeliest (id, logprob)."""
    logp = scores.log_softmax(dim=-1)  # (V,)
    best = logp.topk(top) if top else None
    return float(logp[token]), [] if best is None else list(zip(best.indices.tolist(), best.values.tolist(),
                                                                 strict=True))


@dataclass
class EncoderWork:
    """Texts for the encoder-only model with options (equal options compute together)."""

    texts: list[str]
    options: Hashable
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class Chore:
    """``fn(*args)`` to run alone on the decoding thread; ``future`` gets its result or error."""

    fn: Callable
    args: tuple
    future: Future = field(default_factory=Future)

    def run(self) -> None:
        if self.future.set_running_or_notify_cancel():
            try:
                self.future.set_result(self.fn(*self.args))
            except Exception as err:  # the caller gets it; the decoding thread lives on
                self.future.set_exception(err)
