"""One scheduler for every served model: one queue, one decoding thread, the engine's running batch.

Generation (decoder-only) and translation (encoder-decoder) requests are engine groups
(:mod:`aiayn.decoding.engine`): between two steps, waiting requests join the running batch in order while
there is room (rows and cache columns; a beam request takes beam-size rows), finished and cancelled ones
leave. Encoder-only work (fill-mask, embeddings) rides the same queue: requests that arrive within
``wait_ms`` of each other with the same options are computed as one batch between two steps. Other work
(the attention pictures) runs alone between two steps too. Every group is built by
:func:`aiayn.decoding.generation.rows_for`, as the library's ``generate`` builds it, so an answer equals the
request's answer alone (greedy, seeded sampling, beam).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass

import torch

from aiayn.decoding.config import PARALLEL, DecodingConfig
from aiayn.decoding.drafts import Draft
from aiayn.decoding.engine import Engine
from aiayn.decoding.generation import generate
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.source_cache import SourceCache
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.model.transformer import TransformerModel
from aiayn.serve import admission
from aiayn.serve.jobs import Chore, DecodeJob, EncoderWork, Refusal, Refused
from aiayn.serve.limits import Limits

__all__ = ["DecodeJob", "Refusal", "Refused", "Scheduler"]
Job = DecodeJob


@dataclass
class _Running:
    """A request in the running batch and its engine group."""

    job: Job
    group: object
    told: int = 0  # the group's steps the job has been told of

    def tell(self) -> None:
        """Tell the job of the token its group took since it was last told (a prompt pass or a step)."""
        if self.group.steps > self.told:
            self.told = self.group.steps
            self.job.after_step(self.group)


class Scheduler:
    """Runs every request of one model on one thread.

    Args:
        max_batch: rows decoded together (and texts per encoder batch); more requests wait in order.
        capacity: columns of the shared KV cache (the longest prompt + continuation a row may reach).
        prefix_cache: reuse the keys/values of prompt blocks seen before (decoder-only: ``PromptCache``), or the
            encoding of sources seen before (encoder-decoder: ``SourceCache``).
        static: wait-and-batch, for comparison: a batch forms only when none is running and runs until its
            last row ends (finished rows are still computed), then answers all its requests.
        threads: compute threads of the decoding thread (``serve/threads.py``; None: as is).
        encode: encoder-only work, ``(texts, options) -> one result per text``; ``wait_ms``: how long the first
            such request waits for company.
        limits: what one request may ask (:meth:`admission` checks a job against them).
        draft: greedy and sampled requests are decoded speculatively (``decoding/drafted.py``: rows with their own
            drafts and acceptances verified in one pass), ``draft_tokens`` a pass (None: adapted);
            ``self.speculative`` counts drafted and accepted tokens.
    """

    def __init__(self, model: TransformerModel, max_batch: int = 16, capacity: int | None = None,
                 prefix_cache: PromptCache | SourceCache | None = None, static: bool = False,
                 threads: int | None = None,
                 encode: Callable[[list[str], Hashable], list] | None = None, wait_ms: float = 5.0,
                 limits: Limits | None = None, draft: Draft | None = None, draft_tokens: int | None = None) -> None:
        self.model, self.max_batch, self.prefix_cache, self.static = model, max_batch, prefix_cache, static
        self.draft, self.draft_tokens, self.speculative = draft, draft_tokens, SpeculativeStats()
        self.limits = limits or Limits()
        self.capacity, self.threads = capacity or model.config.max_len, threads
        self.encode, self.wait = encode, wait_ms / 1000
        self.engine = Engine(model, capacity=self.capacity, prompt_cache=prefix_cache,
                             prefill_chunk=self.limits.prefill_chunk or None,
                             long_prefill=self.limits.long_prefill_token_threshold,
                             prefill_budget=self.limits.prefill_budget)
        self.waiting: queue.Queue = queue.Queue()  # jobs, encoder work and chores, in arrival order
        self.held: Job | None = None  # the next in line, waiting for room
        self.running: list[_Running] = []
        self.encoder_work: list[EncoderWork] = []
        self._open = True  # whether requests may join now
        self.joined = self.largest_batch = self.batches = 0
        self.on_finish: Callable[[Job], None] | None = None  # told of each finished request
        self.submitted = self.finished = self.cancelled = 0  # submitted: the server's thread; others: decoder
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="aiayn-decode", daemon=True)

    @property
    def steps(self) -> int:
        return self.engine.steps

    @property
    def rows(self) -> list[_Running]:
        return self.running

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def admission(self, *jobs: Job) -> Refusal | None:
        """The one admission check (``serve/admission.py``), for jobs that come together (one request's): each job's
        decoding (set on the job), the cache its input and limit need, and, for a language model, no more than
        ``limits.max_streams`` requests open (``busy``). None: all may be submitted."""
        return admission.check(jobs, self.model, self.limits, self.capacity, self.open_requests,
                               lambda job: self.engine.start_width(torch.tensor([job.inputs])))

    def decoding_for(self, decoding: DecodingConfig) -> DecodingConfig | Refusal:
        """A request's decoding resolved against the served model and limits (``admission.decoding_for``)."""
        return admission.decoding_for(decoding, self.model, self.limits)

    def submit(self, *jobs: Job) -> None:
        """Queue decode jobs that come together (one request's): all, or none with :class:`Refused` (the
        :meth:`admission` check's refusal)."""
        refusal = self.admission(*jobs)
        if refusal is not None:
            raise Refused(refusal)
        for job in jobs:
            self.submitted += 1
            job.submitted_at = time.perf_counter()
            self.waiting.put(job)

    def submit_encoder(self, texts: list[str], options: Hashable) -> Future:
        """Queue encoder-only work; the future gets one result per text."""
        work = EncoderWork(texts, options)
        self.waiting.put(work)
        return work.future

    def run_alone(self, fn: Callable, *args) -> Future:
        """Run ``fn(*args)`` on the decoding thread between two steps (the server's one compute thread)."""
        chore = Chore(fn, args)
        self.waiting.put(chore)
        return chore.future

    @property
    def open_requests(self) -> int:
        """Requests submitted and not yet finished (running or waiting)."""
        return self.submitted - self.finished

    def stats(self) -> dict:
        """The counts /health reports: steps, joined / open / cancelled requests, largest batch, encoder
        batches, prefix cache."""
        prefix = {} if self.prefix_cache is None else self.prefix_cache.stats()
        drafted = {} if self.draft is None else {"drafted_tokens": self.speculative.proposed,
                                                 "accepted_tokens": self.speculative.accepted}
        return {"steps": self.steps, "joined": self.joined, "open_requests": self.open_requests, "cancelled":
                self.cancelled, "largest_batch": self.largest_batch, "batches": self.batches, **prefix, **drafted}

    def _run(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        with torch.no_grad():
            while not self._stop.is_set():
                self._take()
                self._run_encoder_work()
                if self.running:
                    self._step()

    def _take(self) -> None:
        """Pull what waits: chores run now, encoder work collects, requests join while there is room (static:
        only while no batch runs)."""
        self._open = not (self.static and self.running)
        while self.held is None or self._admit(self.held):
            idle = not self.running and not self.encoder_work and self.held is None
            try:
                item = self.waiting.get(timeout=0.05) if idle else self.waiting.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Chore):
                item.run()
            elif isinstance(item, EncoderWork):
                self.encoder_work.append(item)
            elif self._admit(item) is False:
                return

    def _admit(self, job: Job) -> bool:
        """Start ``job`` if it fits (True); else hold it, in order, until rows leave (False)."""
        self.held = None
        if job.cancelled:
            self._done(job, "cancelled")
            return True
        if job.decoding.strategy in PARALLEL:  # every position at once, not step by step: alone, now
            return self._run_alone(job)
        try:
            group, inputs, beams = job.group(self.model, self.draft, self.draft_tokens, self.speculative)
        except ValueError as err:  # a request the engine cannot decode: its own error
            job.fail(err)
            self._done(job, "error")
            return True
        busy = self.running and (not self._open or self.engine.rows + group.size > self.max_batch
                                 or not self.engine.fits(self.engine.start_width(inputs), group))
        if busy:
            self.held = job
            return False
        try:
            job.cached_tokens = self.engine.admit(group, inputs, beams, job.adapter)  # its prompt pass
        except Exception as err:  # the request gets it (a grammar that fails on its first token); the thread lives on
            job.fail(err)
            self._done(job, "error")
            return True
        self.running.append(_Running(job, group))
        self.running[-1].tell()  # the prompt pass's token
        self.joined += 1
        self.largest_batch = max(self.largest_batch, self.engine.rows)
        if group.done:  # nothing to generate (a limit of 0)
            self._leave([self.running[-1]])
        return True

    def _run_alone(self, job: Job) -> bool:
        try:
            ids = generate(self.model, torch.tensor([job.inputs]), config=job.decoding)[0]
        except Exception as err:  # the request gets it; the thread lives on
            job.fail(err)
            self._done(job, "error")
            return True
        self._done(job, None, outputs=(ids, "stop"))
        return True

    def _run_encoder_work(self) -> None:
        """Compute the encoder work that waited long enough (or fills a batch), one batch per options."""
        if not self.encoder_work:
            return
        size = sum(len(w.texts) for w in self.encoder_work)
        if size < self.max_batch and time.perf_counter() - self.encoder_work[0].arrived < self.wait:
            if not self.running:
                time.sleep(0.001)
            return
        work, self.encoder_work = self.encoder_work, []
        for options in dict.fromkeys(w.options for w in work):
            same = [w for w in work if w.options == options]
            texts = [t for w in same for t in w.texts]
            try:
                results = self.encode(texts, options)
            except Exception as err:  # the error goes to the requests; the thread lives on
                for w in same:
                    w.future.set_exception(err)
                continue
            self.batches += 1
            start = 0
            for w in same:
                w.future.set_result(results[start: start + len(w.texts)])
                start += len(w.texts)

    def _step(self) -> None:
        for running in self.running:
            if running.job.cancelled and not running.group.done:
                running.group.cancel()
        if not self.static:
            self._leave([r for r in self.running if r.group.done])
        if not self.running:
            return
        try:
            self.engine.step()
        except Exception as err:  # every running request gets the error; the thread lives on
            for running in self.running:
                running.job.fail(err)
            self._leave(self.running, "error")
            return
        for running in self.running:
            running.tell()
        finished = [r for r in self.running if r.group.done]
        if self.static and len(finished) < len(self.running):
            return
        self._leave(finished)

    def _leave(self, leaving: list[_Running], reason: str | None = None) -> None:
        if not leaving:
            return
        self.engine.remove([r.group for r in leaving])
        self.running = [r for r in self.running if r not in leaving]
        for r in leaving:
            self._done(r.job, reason or ("cancelled" if r.job.cancelled else None), r.group)

    def _done(self, job: Job, reason: str | None, group=None, outputs: tuple | None = None) -> None:
        """Count the request finished, then tell it (its answer may go out at once): its ids and the reason its
        rows group gives (``reason``: cancelled or error, which the scheduler decided)."""
        self.finished += 1
        self.cancelled += reason == "cancelled"
        if reason == "error":
            return
        if outputs is None:
            outputs = group.outputs()[0] if group is not None else (job.generated, "cancelled")
        ids, why = outputs
        job.generated, job.finish_reason = list(ids), reason or why
        if self.on_finish is not None:
            self.on_finish(job)
        job.finish(ids, reason or why)
