"""Memory that stays flat over a long run.

Token-count batching makes every batch a new tensor shape, so a training process frees and allocates blocks of
ever-different sizes. glibc's malloc keeps freed heap memory for reuse, and blocks of one size rarely fit the
next: resident memory grew without bound (measured on the de->en recipe: 1.3 GB after a minute, 2.8 GB after five,
~6 GB at 30 minutes). jemalloc, whose size classes and decay give freed pages back, keeps it flat at full speed
(the recipe's hour: largest RSS 1.69 GB against 3.92 GB for glibc trimmed, growth after minute 3 1.013 against
1.205, 1.17x its tokens/s; docs/translation-results.md). So the training commands (``aiayn train``,
``experiment``, ``distill``) restart themselves with the system's jemalloc preloaded (``restart_under_jemalloc``:
same pid, same arguments, a console line that says so; Debian's libjemalloc2, which ``make install`` installs;
never when the user set LD_PRELOAD). Where there is none, or with ``AIAYN_MALLOC=glibc``, glibc stays and the
trainer hands the heap's free pages back every ``EVERY`` steps (``malloc_trim(0)``): flat just after each trim,
but what ten steps touch in between grows as the heap fragments. ``AIAYN_MALLOC=default`` leaves glibc untouched,
for measuring. (Fixing glibc's mmap threshold instead kept memory flat over five minutes, but cost 40% of the
training speed: every large block then pays for fresh pages.) Measured by ``benchmarks/bench_rss.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import cache
from pathlib import Path

EVERY = 10  # steps between two trims (every step: 16% fewer steps in 5 minutes; pages are faulted in again)


JEMALLOC = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
            "/usr/lib64/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2")  # Debian's libjemalloc2, others


MALLOCS = ("jemalloc", "glibc", "default")  # the values of AIAYN_MALLOC


def jemalloc_path() -> str | None:
    """The system's jemalloc library, or None."""
    return next((path for path in JEMALLOC if Path(path).is_file()), None)


def allocator() -> str:
    """Which malloc serves this process: "jemalloc" where it is loaded, else "glibc"."""
    try:
        return "jemalloc" if "libjemalloc" in Path("/proc/self/maps").read_text() else "glibc"
    except OSError:
        return "glibc"


def jemalloc_environment(environ: dict[str, str]) -> dict[str, str] | None:
    """The environment that preloads jemalloc, or None: not found, AIAYN_MALLOC names glibc (``glibc``: glibc with
    the trims; ``default``: glibc untouched, for measuring), or LD_PRELOAD already set (jemalloc by an earlier
    restart, or a library of the user's own, which is never touched); any other AIAYN_MALLOC is refused."""
    setting = environ.get("AIAYN_MALLOC", "jemalloc")
    if setting not in MALLOCS:
        raise ValueError(f"AIAYN_MALLOC={setting}: expected one of {', '.join(MALLOCS)} (unset means jemalloc)")
    lib = jemalloc_path()
    if setting != "jemalloc" or lib is None or environ.get("LD_PRELOAD", "").strip():
        return None
    return {**environ, "LD_PRELOAD": lib}


def restart_under_jemalloc() -> None:
    """Replace this process by the same command with jemalloc preloaded (same pid, arguments and environment
    otherwise; torchrun's workers too), saying so on the console (once per machine under torchrun); returns only
    where there is nothing to do."""
    env = jemalloc_environment(dict(os.environ))
    if env is None:
        return
    if os.environ.get("LOCAL_RANK", "0") == "0":  # stdout: stderr is for errors, each one line
        print(f"aiayn: restarting under jemalloc ({env['LD_PRELOAD']}) to keep memory flat over a long run; "
              "AIAYN_MALLOC=glibc turns this off")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, jemalloc, or AIAYN_MALLOC=default to measure without)."""
    name = ctypes.util.find_library("c")
    if os.environ.get("AIAYN_MALLOC") == "default" or name is None or allocator() == "jemalloc":
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
