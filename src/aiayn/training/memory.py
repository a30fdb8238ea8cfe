"""Memory that stays flat over a long run.

Token-count batching makes every batch a new tensor shape, so a training process frees and allocates blocks of
ever-different sizes. glibc's malloc keeps freed heap memory for reuse, and blocks of one size rarely fit the
next: resident memory grew without bound (measured on the de->en recipe: 1.3 GB after a minute, 2.8 GB after
five, ~6 GB at 30 minutes). ``malloc_trim(0)`` hands the free pages inside the heap back to the system; the
trainer calls it every ``EVERY`` steps. Just after a trim the process is flat over an hour (1.09 to 1.14 GB,
``rss_mb`` in the training log); what still grows is what ten steps touch between two trims (3.9 GB at most
in an hour): the heap fragments. (Fixing glibc's mmap threshold instead kept memory flat over five
minutes, but cost 40% of the training speed: every large block then pays for fresh pages.) Measured by
``benchmarks/bench_rss.py`` (docs/translation.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

EVERY = 10  # steps between two trims (every step: 16% fewer steps in 5 minutes; pages are faulted in again)


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, or AIAYN_MALLOC=default to measure without it)."""
    name = ctypes.util.find_library("c")
    if os.environ.get("AIAYN_MALLOC") == "default" or name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def resident_mb() -> float | None:
    """This process's resident memory (VmRSS) in MB; None where /proc is missing (not Linux)."""
    try:
        with open("/proc/self/status") as status:
            return next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:")), None)
    except OSError:
        return None


def release_free_memory() -> bool:
    """Give the heap's free pages back to the system; whether it could (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
