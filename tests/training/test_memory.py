"""training/memory.py: the training commands restart under jemalloc where the system has it; under glibc, free
pages inside the heap go back to the system (so a training process's resident memory stays flat over ever-new
batch shapes; measured by benchmarks/bench_rss.py); AIAYN_MALLOC=default leaves glibc alone, for measuring."""

import ctypes.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.training import memory
from tiny_runs import train_command, wait_for_step, workers, write_recipe

CHECK = """
import ctypes, ctypes.util
from aiayn.training.memory import release_free_memory
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def rss_mb():
    return int(next(x for x in open("/proc/self/status") if x.startswith("VmRSS")).split()[1]) / 1024

blocks = [libc.malloc(64 << 10) for _ in range(3000)]  # 64 KB each: heap blocks, 190 MB in all, touched
for block in blocks:
    libc.memset(block, 1, 64 << 10)
for block in blocks[:-1]:  # the last one keeps the freed space inside the heap (not at its top)
    libc.free(block)
before = rss_mb()
print(release_free_memory(), round(before - rss_mb()))
"""


def _run(env: dict) -> tuple[str, int]:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    done, released = result.stdout.split()
    return done, int(released)


def test_free_heap_pages_go_back_to_the_system_unless_asked_not_to():
    done, released = _run(dict(os.environ))
    assert done == "True" and released > 100, released  # MB given back of the ~190 freed
    done, released = _run({**os.environ, "AIAYN_MALLOC": "default"})
    assert done == "False" and released < 20, released


def test_resident_memory_is_read_in_mb_and_follows_what_the_process_touches():
    import torch

    from aiayn.training.memory import resident_mb

    before = resident_mb()
    block = torch.ones(200 << 20, dtype=torch.uint8)  # 200 MB, written
    assert before is not None and resident_mb() - before > 150, (before, resident_mb())
    del block


def test_jemalloc_is_preloaded_where_found_unless_glibc_is_asked_for(tmp_path, monkeypatch):
    lib = tmp_path / "libjemalloc.so.2"
    monkeypatch.setattr(memory, "JEMALLOC", (str(tmp_path / "missing.so"), str(lib)))
    assert memory.jemalloc_environment({"PATH": "/bin"}) is None  # not on this system: nothing to do
    lib.write_bytes(b"")
    assert memory.jemalloc_environment({"PATH": "/bin"}) == {"PATH": "/bin", "LD_PRELOAD": str(lib)}
    assert memory.jemalloc_environment({"LD_PRELOAD": "/x.so"}) is None  # the user's own preload: left alone
    assert memory.jemalloc_environment({"LD_PRELOAD": str(lib)}) is None  # already preloaded: no second restart
    for setting in ("glibc", "default"):
        assert memory.jemalloc_environment({"AIAYN_MALLOC": setting}) is None
    with pytest.raises(ValueError, match="AIAYN_MALLOC=glib: expected one of jemalloc, glibc, default"):
        memory.jemalloc_environment({"AIAYN_MALLOC": "glib"})  # a typo is refused, not read as glibc


def test_a_mistyped_allocator_stops_the_command_with_a_one_line_error(tmp_path):
    recipe = write_recipe(tmp_path, "typo", max_steps=2)
    result = subprocess.run(train_command("--config", str(recipe)), capture_output=True, text=True,
                            env={**os.environ, "AIAYN_MALLOC": "jemaloc"}, timeout=300)
    assert result.returncode == 2 and not (tmp_path / "typo").exists()
    assert result.stderr.strip() == "aiayn: error: AIAYN_MALLOC=jemaloc: expected one of jemalloc, glibc, default " \
        "(unset means jemalloc)"


def _malloc_of_a_run(tmp_path, name: str, env: dict) -> tuple[str, str]:
    """The malloc a tiny training run logged, and its console (stdout: stderr is for errors)."""
    recipe = write_recipe(tmp_path, name, max_steps=2, eval_every=2, bleu_sentences=0, keep_last=0)
    result = subprocess.run(train_command("--config", str(recipe)), capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    first = json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[0])
    return first["malloc"], result.stdout


RESTART = "aiayn: restarting under jemalloc ({}) to keep memory flat over a long run; AIAYN_MALLOC=glibc turns " \
    "this off"


def _libc() -> str:
    """The path of the C library this process has loaded (a harmless LD_PRELOAD of the user's own)."""
    maps = Path("/proc/self/maps").read_text().split()
    return next(word for word in maps if "/libc.so" in word or "/libc-" in word)


@pytest.mark.long  # a training process restarted under jemalloc
def test_aiayn_train_runs_under_jemalloc_where_the_system_has_it_and_says_so(tmp_path):
    # the system's answer, not the code's (make install / .ci/run install Debian's libjemalloc2): ldconfig's cache
    found = ctypes.util.find_library("jemalloc") is not None
    env = {k: v for k, v in os.environ.items() if k not in ("AIAYN_MALLOC", "LD_PRELOAD")}
    malloc, console = _malloc_of_a_run(tmp_path, "auto", env)
    assert malloc == ("jemalloc" if found else "glibc")
    assert (RESTART.format(memory.jemalloc_path()) in console.splitlines()) == found, console[-2000:]
    malloc, console = _malloc_of_a_run(tmp_path, "glibc", {**env, "AIAYN_MALLOC": "glibc"})
    assert malloc == "glibc" and "restarting" not in console
    malloc, console = _malloc_of_a_run(tmp_path, "theirs", {**env, "LD_PRELOAD": _libc()})
    assert malloc == "glibc" and "restarting" not in console  # the user's LD_PRELOAD: never restarted


@pytest.mark.long  # torchrun: restarts
def test_every_torchrun_worker_restarts_under_jemalloc_and_the_console_says_it_once(tmp_path):
    found = ctypes.util.find_library("jemalloc") is not None  # ldconfig's answer (.ci/run installs it)
    recipe = write_recipe(tmp_path, "ddp", max_steps=400, eval_every=4, bleu_sentences=0, keep_last=0)
    env = {k: v for k, v in os.environ.items() if k not in ("AIAYN_MALLOC", "LD_PRELOAD")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "aiayn", "train", "--config", str(recipe)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env={**env, "OMP_NUM_THREADS": "1"}) as job:
        try:
            wait_for_step(tmp_path / "ddp", 4, job)
            ranks = workers(job.pid)
            maps = [Path(f"/proc/{pid}/maps").read_text() for pid in ranks]
        finally:
            job.send_signal(signal.SIGTERM)
            console = job.communicate(timeout=120)[0]
    assert len(ranks) == 2 and all(("libjemalloc" in m) == found for m in maps), (ranks, console[-2000:])
    assert console.splitlines().count(RESTART.format(memory.jemalloc_path())) == found, console[-2000:]
