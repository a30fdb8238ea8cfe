"""Dynamic batching: texts of requests that arrive within a short wait are decoded as one batch.

Decoding runs on one worker thread, so the event loop keeps accepting requests meanwhile. Requests are
grouped by decoding options; each gets back exactly its own results, in order. Greedy and beam search
are batch-invariant (tested in tests/test_decoding.py), so a batched result equals the result alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from aiayn.serve.threads import compute_executor


@dataclass
class _Pending:
    texts: list[str]
    options: Hashable  # the request's DecodingConfig: equal options decode together
    future: asyncio.Future = field(repr=False)


TranslateFn = Callable[[list[str], Hashable], list[str]]


class DynamicBatcher:
    """Collects requests for up to ``wait_ms`` (or until ``max_batch`` texts) and translates them together.

    Args:
        translate: (texts, options) -> translations, called on the worker thread.
        max_batch: texts per batch (a single larger request still goes through whole).
        wait_ms: how long the first request of a batch waits for company.
    """

    def __init__(self, translate: TranslateFn, max_batch: int = 32, wait_ms: float = 5.0,
                 threads: int | None = None) -> None:
        """``threads``: compute threads of the decoding thread (see ``serve/threads.py``; None: as is)."""
        self.translate, self.max_batch, self.wait = translate, max_batch, wait_ms / 1000
        self.executor = compute_executor(threads)
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.batches = 0  # batches decoded so far (reported by /health)

    async def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.executor.shutdown(wait=True)

    async def submit(self, texts: list[str], options: Hashable) -> list[str]:
        """Queue ``texts`` and wait for their translations."""
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(texts, options, future))
        return await future

    async def run_alone(self, fn: Callable, *args):
        """Run ``fn(*args)`` on the decoding thread (never at the same time as a batch)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _collect(self) -> list[_Pending]:
        loop = asyncio.get_running_loop()
        group = [await self.queue.get()]
        size, deadline = len(group[0].texts), loop.time() + self.wait
        while size < self.max_batch and (remaining := deadline - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(self.queue.get(), remaining)
            except TimeoutError:
                break
            group.append(item)
            size += len(item.texts)
        return group

    async def _loop(self) -> None:
        while True:
            group = await self._collect()
            for options in dict.fromkeys(p.options for p in group):
                await self._run(options, [p for p in group if p.options == options])

    async def _run(self, options: Hashable, items: list[_Pending]) -> None:
        texts = [t for p in items for t in p.texts]
        try:
            results = await self.run_alone(self.translate, texts, options)
        except Exception as err:  # the error goes to the requests; the loop lives on
            for p in items:
                if not p.future.done():
                    p.future.set_exception(err)
            return
        self.batches += 1
        start = 0
        for p in items:
            if not p.future.done():  # a client that went away has a cancelled future
                p.future.set_result(results[start: start + len(p.texts)])
            start += len(p.texts)
