"""One team of compute threads in a server process.

PyTorch's CPU kernels run on an OpenMP team per calling thread. GNU OpenMP makes its worker threads sleep
almost at once (and wakes them for every kernel) when more of them exist than CPU cores; so a decoding
thread next to a main thread that has itself run parallel kernels (loading the model does) pays a wake-up
per matrix product: 2-4x slower decoding steps on 2 cores (``benchmarks/bench_threads.py``). The server
therefore loads the model with one thread on the main thread and lets its one decoding thread use them all.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch


def single_threaded_main() -> int:
    """Call on the main thread before anything computes: it keeps one compute thread (and so never starts
    a team). Returns the count it had, for :func:`compute_executor` or ``torch.set_num_threads``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return threads


def compute_executor(threads: int | None = None) -> ThreadPoolExecutor:
    """One worker thread for all of a server's computing, using ``threads`` compute threads (None: as is)."""
    initializer = None if threads is None else torch.set_num_threads
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiayn-compute", initializer=initializer,
                              initargs=() if threads is None else (threads,))
