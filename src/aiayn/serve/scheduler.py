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

from aiayn.decoding.engine import Engine
from aiayn.decoding.prefix import PromptCache
from aiayn.model.transformer import TransformerModel
from aiayn.serve.jobs import Chore, EncoderWork, GenerationRequest, TranslationRequest

__all__ = ["GenerationRequest", "Scheduler", "TranslationRequest"]
Job = GenerationRequest | TranslationRequest


@dataclass
class _Running:
    """A request in the running batch and its engine group."""

    job: Job
    group: object


class Scheduler:
    """Runs every request of one model on one thread.

    Args:
        max_batch: rows decoded together (and texts per encoder batch); more requests wait in order.
        capacity: columns of the shared KV cache (the longest prompt + continuation a row may reach).
        prefix_cache: decoder-only: reuse the keys/values of prompt blocks seen before.
        static: wait-and-batch, for comparison: a batch forms only when none is running and runs until its
            last row ends (finished rows are still computed), then answers all its requests.
        threads: compute threads of the decoding thread (``serve/threads.py``; None: as is).
        encode: encoder-only work, ``(texts, options) -> one result per text``; ``wait_ms``: how long the first
            such request waits for company.
    """

    def __init__(self, model: TransformerModel, max_batch: int = 16, capacity: int | None = None,
                 prefix_cache: PromptCache | None = None, static: bool = False, threads: int | None = None,
                 encode: Callable[[list[str], Hashable], list] | None = None, wait_ms: float = 5.0) -> None:
        self.model, self.max_batch, self.prefix_cache, self.static = model, max_batch, prefix_cache, static
        self.capacity, self.threads = capacity or model.config.max_len, threads
        self.encode, self.wait = encode, wait_ms / 1000
        self.engine = Engine(model, capacity=self.capacity, prompt_cache=prefix_cache)
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

    def submit(self, job: Job) -> None:
        """Queue a generation or translation request (a prompt too long for the cache is a ValueError)."""
        if isinstance(job, GenerationRequest) and len(job.prompt) + job.max_new_tokens > self.capacity:
            raise ValueError(f"prompt and max_new_tokens: {len(job.prompt)} + {job.max_new_tokens} "
                             f"tokens exceed the model's {self.capacity}")
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
        return {"steps": self.steps, "joined": self.joined, "open_requests": self.open_requests,
                "cancelled": self.cancelled, "largest_batch": self.largest_batch, "batches": self.batches, **prefix}

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
        try:
            group, inputs, beams = job.group(self.model)
        except ValueError as err:  # a request the engine cannot decode: its own error
            job.fail(err)
            self._done(job, "error")
            return True
        busy = self.running and (not self._open or self.engine.rows + group.size > self.max_batch
                                 or not self.engine.fits(self.engine.start_width(inputs), group))
        if busy:
            self.held = job
            return False
        self.engine.admit(group, inputs, beams)
        self.running.append(_Running(job, group))
        self.joined += 1
        self.largest_batch = max(self.largest_batch, self.engine.rows)
        if group.done:  # nothing to generate (a limit of 0)
            self._leave([self.running[-1]])
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
            running.job.after_step(running.group, self.model.config.eos_id)
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

    def _done(self, job: Job, reason: str | None, group=None) -> None:
        """Count the request finished, then tell it (its answer may go out at once)."""
        self.finished += 1
        self.cancelled += reason == "cancelled"
        if self.on_finish is not None and reason != "error":
            self.on_finish(job)
        job.finish(group, reason)
