"""Continuous batching for a decoder-only model (the idea of Orca and vLLM, written small).

One decoding thread keeps a running batch. Between two steps, waiting requests join it: a joining prompt
is computed alone into a cache row of its own and then appended, left-padded to the batch's width (each
row keeps its own positions and never attends to padding: ``DecoderOnly.decode(left_pad=...)``); a row
leaves as soon as it ends. So a long generation never holds up a short one, and each answer is the one the
request would get alone (greedy, or sampling with its own seeded generator).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.decoding.core import forbid
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import draw, pad_is_last
from aiayn.model.cache import DecodeState
from aiayn.model.transformer import DecoderOnly


@dataclass
class GenerationRequest:
    """One prompt to continue. ``emit(event)`` is called on the decoding thread: ``{"id": token}`` per
    token, then ``{"finish_reason": "stop" | "length" | "cancelled", ...counts}``. With ``logprobs`` (a number
    of alternatives, 0 or more) each token's event also holds ``"logprob"`` (the model's log-probability of the
    token, before temperature and filtering) and ``"top"``: the ``logprobs`` likeliest ``(id, logprob)``."""

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

    def __post_init__(self) -> None:
        self.generator = torch.Generator()
        self.generator.manual_seed(self.seed if self.seed is not None else int(torch.randint(2**62, ()).item()))

    def choose(self, logits: Tensor, pad_last: bool = False) -> int:
        """The next token from (1, V) scores: arg-max at temperature 0, else a draw from the filtered
        distribution with this request's generator (as ``aiayn.generate`` draws for it alone)."""
        if self.temperature == 0:
            return int(logits.argmax(dim=-1))
        return int(draw(logits, self.generator, self.temperature, self.top_k, self.top_p, pad_last))


class ContinuousBatcher:
    """Runs requests on ``model`` in one batch that they join and leave between steps.

    Args:
        max_batch: rows decoded together; more requests wait in order.
        capacity: columns of the shared KV cache (the longest prompt + continuation a row may reach).
    Invariant between steps: ``tokens`` (B, W) holds every row left-padded to width W, and the cache
    holds columns 0..W-2 (the last column is what the next step reads).
    """

    def __init__(self, model: DecoderOnly, max_batch: int = 16, capacity: int | None = None,
                 prefix_cache: PromptCache | None = None, static: bool = False, threads: int | None = None) -> None:
        """``prefix_cache``: reuse the keys/values of prompt blocks seen before. ``static``: wait-and-batch,
        for comparison: a batch forms only when none is running and runs until its last row ends (finished
        rows are still computed, as ``aiayn.generate`` computes them), then answers all its requests.
        ``threads``: compute threads of the decoding thread (``serve/threads.py``; None: as is)."""
        self.model, self.max_batch, self.prefix_cache, self.static = model, max_batch, prefix_cache, static
        self.capacity, self.threads = capacity or model.config.max_len, threads
        self.waiting: queue.Queue[GenerationRequest] = queue.Queue()
        self.chores: queue.Queue[tuple[Future, Callable, tuple]] = queue.Queue()  # run between two steps
        self.held: GenerationRequest | None = None  # the next in line, waiting for room in the cache
        self.rows: list[GenerationRequest] = []
        self.tokens: Tensor | None = None
        self.state: DecodeState | None = None
        self.steps = self.joined = self.largest_batch = 0
        self.on_finish: Callable[[GenerationRequest], None] | None = None  # told of each finished request
        self.submitted = self.finished = self.cancelled = 0  # submitted: the server's thread; others: decoder
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="aiayn-generate", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def submit(self, request: GenerationRequest) -> None:
        if len(request.prompt) + request.max_new_tokens > self.capacity:
            raise ValueError(f"prompt and max_new_tokens: {len(request.prompt)} + {request.max_new_tokens} "
                             f"tokens exceed the model's {self.capacity}")
        self.submitted += 1
        request.submitted_at = time.perf_counter()
        self.waiting.put(request)

    @property
    def open_requests(self) -> int:
        """Requests submitted and not yet finished (running or waiting)."""
        return self.submitted - self.finished

    def stats(self) -> dict:
        """The counts /health reports: steps, joined / open / cancelled requests, largest batch, prefix cache."""
        prefix = {} if self.prefix_cache is None else self.prefix_cache.stats()
        return {"steps": self.steps, "joined": self.joined, "open_requests": self.open_requests,
                "cancelled": self.cancelled, "largest_batch": self.largest_batch, **prefix}

    def run_alone(self, fn: Callable, *args) -> Future:
        """Run ``fn(*args)`` on the decoding thread between two steps (the server's one compute thread)."""
        future: Future = Future()
        self.chores.put((future, fn, args))
        return future

    def _run(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        with torch.no_grad():
            while not self._stop.is_set():
                self._do_chores()
                self._admit()
                if self.rows:
                    self._step()

    def _do_chores(self) -> None:
        while not self.chores.empty():
            future, fn, args = self.chores.get_nowait()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except Exception as err:  # the caller gets it; the decoding thread lives on
                    future.set_exception(err)

    def _admit(self) -> None:
        if self.static and self.rows:
            return
        while len(self.rows) < self.max_batch:
            request, self.held = self.held, None
            if request is None:
                try:
                    request = self.waiting.get(timeout=0.05) if not self.rows else self.waiting.get_nowait()
                except queue.Empty:
                    return
            if request.cancelled:
                request.finish_reason = "cancelled"
                self._finish(request)
            elif self._fits(request):
                self._join(request)
            else:
                self.held = request  # in order: it joins when rows have left
                return

    def _fits(self, request: GenerationRequest) -> bool:
        """Whether every row, the newcomer included, can still reach its limit in the cache's columns."""
        if self.tokens is None:
            return True
        width = max(len(request.prompt), self.tokens.size(1))
        longest = max([r.max_new_tokens - len(r.generated) for r in self.rows] + [request.max_new_tokens])
        return width - 1 + longest <= self.capacity

    def _join(self, request: GenerationRequest) -> None:
        """Compute the prompt alone into a cache row, then append it to the batch (widening the batch when
        the prompt is longer than the batch is wide)."""
        n = len(request.prompt)
        width = n if self.tokens is None else max(n, self.tokens.size(1))
        if self.tokens is not None and width > self.tokens.size(1):
            extra = width - self.tokens.size(1)  # new padding columns in front of every row
            self.tokens = torch.cat([self.tokens.new_full((len(self.rows), extra), self.model.config.pad_id),
                                     self.tokens], dim=1)  # (B, W)
            self.state.left_pad = self.state.left_pad + extra
            self.state.cache.shift(extra)
        row = torch.tensor([[self.model.config.pad_id] * (width - n) + request.prompt])  # (1, W)
        left = torch.tensor([width - n])
        cache = self._prefill(request.prompt, row, width - n)
        if self.tokens is None:
            self.tokens, self.state = row, DecodeState(cache, left_pad=left)
        else:
            self.tokens = torch.cat([self.tokens, row])
            self.state.left_pad = torch.cat([self.state.left_pad, left])
            self.state.cache = self.state.cache.append_rows(cache)
        self.rows.append(request)
        self.joined += 1
        self.largest_batch = max(self.largest_batch, len(self.rows))

    def _prefill(self, prompt: list[int], row: Tensor, first: int):
        """A one-row cache holding columns 0..W-2 of ``row`` (the prompt starts at column ``first``): the
        cached prefix blocks are copied in, the model computes the rest."""
        cache = self.model.new_cache(1, self.capacity, next(self.model.parameters()))
        width, start = row.size(1), 0
        if self.prefix_cache is not None:
            start = self.prefix_cache.load(prompt, cache, first)
        if width - 1 > start:
            self.model.decode(row[:, start: width - 1], cache, torch.tensor([first]))  # fills up to W-2
        if self.prefix_cache is not None:
            self.prefix_cache.store(prompt, cache, first, len(prompt) - 1)
        return cache

    def _step(self) -> None:
        cfg = self.model.config
        logits = forbid(self.model.step(self.tokens, self.state)[:, -1].float(), cfg, no_eos=False)  # (B, V)
        for i, request in enumerate(self.rows):
            if len(request.generated) < request.min_new_tokens:
                logits[i, cfg.eos_id] = float("-inf")
        pad_last = pad_is_last(cfg, logits.size(-1))
        chosen = [request.choose(logits[i: i + 1], pad_last) for i, request in enumerate(self.rows)]
        self.tokens = torch.cat([self.tokens, torch.tensor(chosen)[:, None]], dim=1)  # (B, W+1)
        self.steps += 1
        keep = []
        for i, (request, token) in enumerate(zip(self.rows, chosen, strict=True)):
            if request.finish_reason is None:
                request.finish_reason = self._advance(request, token, cfg.eos_id, logits[i])
            if request.finish_reason is None or self.static:  # static: a finished row waits for the batch
                keep.append(i)
            else:
                self._finish(request)
        if self.static and all(request.finish_reason for request in self.rows):
            for request in self.rows:
                self._finish(request)
            keep = []
        if len(keep) < len(self.rows):
            self._leave(keep)

    def _advance(self, request: GenerationRequest, token: int, eos_id: int, logits: Tensor) -> str | None:
        """Record and emit ``token`` (with its log-probabilities if asked, from ``logits`` (V,)); the finish
        reason if the request ends here."""
        if request.cancelled:
            return "cancelled"
        if token == eos_id:
            return "stop"
        request.generated.append(token)
        request.token_times.append(time.perf_counter())
        event = {"id": token}
        if request.logprobs is not None:
            logp = logits.log_softmax(dim=-1)  # (V,)
            top = logp.topk(request.logprobs) if request.logprobs else None
            event.update(logprob=float(logp[token]), top=[] if top is None else
                         list(zip(top.indices.tolist(), top.values.tolist(), strict=True)))
        request.emit(event)
        return "length" if len(request.generated) >= request.max_new_tokens else None

    def _leave(self, keep: list[int]) -> None:
        """Drop finished rows, then the padding columns every remaining row has in front."""
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.tokens = self.state = None
            return
        index = torch.tensor(keep)
        self.tokens = self.tokens.index_select(0, index)
        self.state.left_pad = self.state.left_pad.index_select(0, index)
        self.state.cache = self.state.cache.select(index)
        common = int(self.state.left_pad.min())
        if common:
            self.tokens = self.tokens[:, common:]
            self.state.left_pad = self.state.left_pad - common
            self.state.cache.shift(-common)

    def _finish(self, request: GenerationRequest) -> None:
        if self.on_finish is not None:
            self.on_finish(request)
        self.finished += 1
        self.cancelled += request.finish_reason == "cancelled"
        request.emit({"finish_reason": request.finish_reason, "prompt_tokens": len(request.prompt),
                      "completion_tokens": len(request.generated)})
