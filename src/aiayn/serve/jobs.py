"""What the scheduler's one queue holds (``serve/scheduler.py``): generation and translation requests (engine
groups, built by :func:`aiayn.decoding.generation.rows_for`), encoder-only work, and chores."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.decoding.beam import BeamRows
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.generation import rows_for
from aiayn.model.transformer import TransformerModel


@dataclass
class GenerationRequest:
    """One prompt to continue. ``emit(event)`` is called on the decoding thread: ``{"id": token}`` per
    token, then ``{"finish_reason": "stop" | "length" | "cancelled" | "error", ...counts}``. With ``logprobs``
    (a number of alternatives, 0 or more) each token's event also holds ``"logprob"`` (the model's
    log-probability of the token, before temperature and filtering) and ``"top"``: the ``logprobs`` likeliest
    ``(id, logprob)``. ``temperature`` 0 is greedy."""

    prompt: list[int]
    max_new_tokens: int
    emit: Callable[[dict], None]
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    logprobs: int | None = None
    min_new_tokens: int = 0  # no end of sequence before this many tokens, as the library's decoding
    generated: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)  # time.perf_counter() as each token came
    submitted_at: float = 0.0
    cancelled: bool = False
    finish_reason: str | None = None

    def decoding(self) -> DecodingConfig:
        return DecodingConfig(strategy="sample", temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                              seed=self.seed, max_new_tokens=self.max_new_tokens, min_new_tokens=self.min_new_tokens)

    def group(self, model: TransformerModel):
        """The engine group, its inputs (1, T) and beams: as ``aiayn.generate`` decodes this prompt alone."""
        return rows_for(model, torch.tensor([self.prompt]), self.decoding())

    def after_step(self, group, eos_id: int) -> None:
        """Record and emit this step's token (with its log-probabilities if asked)."""
        if self.finish_reason is not None or self.cancelled:
            return
        token = int(group.generated[-1][0])
        if token == eos_id:
            self.finish_reason = "stop"
            return
        self.generated.append(token)
        self.token_times.append(time.perf_counter())
        event = {"id": token}
        if self.logprobs is not None:
            event.update(_logprobs(group.last_scores[0], token, self.logprobs))
        self.emit(event)
        if len(self.generated) >= self.max_new_tokens:
            self.finish_reason = "length"

    def finish(self, group, reason: str | None) -> None:
        self.finish_reason = reason or self.finish_reason or "length"
        self.emit({"finish_reason": self.finish_reason, "prompt_tokens": len(self.prompt),
                   "completion_tokens": len(self.generated)})

    def fail(self, err: Exception) -> None:
        self.emit({"finish_reason": "error", "detail": f"{type(err).__name__}: {err}"})
        self.finish_reason = "error"


def _logprobs(scores: Tensor, token: int, top: int) -> dict:
    """The token's log-probability under ``scores`` (V,) and the ``top`` likeliest (id, logprob)."""
    logp = scores.log_softmax(dim=-1)  # (V,)
    best = logp.topk(top) if top else None
    return {"logprob": float(logp[token]),
            "top": [] if best is None else list(zip(best.indices.tolist(), best.values.tolist(), strict=True))}


@dataclass
class TranslationRequest:
    """One source (its ids) to translate with ``decoding`` (its strategy named); ``future`` gets the output
    ids (the best hypothesis, without BOS and EOS) or the error."""

    source: list[int]
    decoding: DecodingConfig
    future: Future = field(default_factory=Future)
    generated: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    submitted_at: float = 0.0
    finish_reason: str | None = None
    _cancelled: bool = False

    @property
    def prompt(self) -> list[int]:
        return self.source

    @property
    def cancelled(self) -> bool:
        return self._cancelled or self.future.cancelled()

    def cancel(self) -> None:
        """The client went away: its rows leave at the next step."""
        self._cancelled = True

    def group(self, model: TransformerModel):
        return rows_for(model, torch.tensor([self.source]), self.decoding)

    def after_step(self, group, eos_id: int) -> None:
        pass

    def finish(self, group, reason: str | None) -> None:
        self.finish_reason = reason or "stop"
        if reason is None and not self.future.done():
            self.generated = group.nbest()[0][0].tokens if isinstance(group, BeamRows) else group.results()[0]
            self.future.set_result(self.generated)
        elif not self.future.done():
            self.future.cancel()

    def fail(self, err: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(err)
        self.finish_reason = "error"


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
