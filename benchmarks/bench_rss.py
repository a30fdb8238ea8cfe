"""Resident memory of a training run over time: runs ``aiayn train`` on a recipe (the de->en recipe by default)
for ``--minutes`` of training and samples the process's RSS (and its children's) every ``--every`` seconds,
once per ``--malloc`` setting, one after the other: ``jemalloc`` (aiayn's default where the system has it:
``aiayn train`` restarts itself with it preloaded, training/memory.py), ``tuned`` (glibc's malloc, trimmed every
10 steps: AIAYN_MALLOC=glibc) and ``default`` (glibc's, untouched: AIAYN_MALLOC=default). Prints JSON
lines {"config", "metric", "value", "unit"}: one ``rss`` line per sample; then per setting the growth after
``--settle`` minutes (the mean of the last quarter of the samples over the mean of the first quarter after
settling), the largest RSS, the steps trained, tokens/s, and the pace's drift (tokens/s of the last quarter of
the logged intervals over the first quarter's).

    python benchmarks/bench_rss.py [--recipe configs/multi30k-de-en.yaml] [--minutes 20] [--settle 3] \\
        [--malloc jemalloc tuned default] [--data-dir ../shared/data/multi30k] [-- extra aiayn train flags]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` and of its children, in MB (0 once it has ended)."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0) / 1024
    return total


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def sample_rss(proc: subprocess.Popen, every: float, name: str | None = None) -> list[tuple[float, float]]:
    """(minute, RSS MB) of ``proc`` every ``every`` seconds until it ends; with ``name``, each printed too."""
    start, samples = time.monotonic(), []
    while proc.poll() is None:
        minute = (time.monotonic() - start) / 60
        samples.append((minute, rss_mb(proc.pid)))
        if name:
            emit(f"{name}/minute{minute:.2f}", "rss", samples[-1][1], "MB")
        time.sleep(every)
    return samples


def growth(samples: list[tuple[float, float]], settle: float) -> float | None:
    """The mean of the last quarter of the samples after ``settle`` minutes over the mean of the first quarter."""
    settled = [mb for minute, mb in samples if minute >= settle and mb > 0]
    quarter = max(len(settled) // 4, 1)
    return sum(settled[-quarter:]) / sum(settled[:quarter]) if settled else None


def malloc_env(malloc: str) -> dict[str, str]:
    """The environment of a training run under ``malloc`` (training/memory.py reads AIAYN_MALLOC)."""
    env = {k: v for k, v in os.environ.items() if k != "AIAYN_MALLOC"}
    return env if malloc == "jemalloc" else {**env, "AIAYN_MALLOC": "glibc" if malloc == "tuned" else "default"}


def run_once(args, malloc: str) -> None:
    """One training run under ``malloc``, sampled; its summary lines."""
    name = f"{Path(args.recipe).stem}/{args.minutes:g}min/{malloc}"
    env = malloc_env(malloc)
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "aiayn", "train", "--config", args.recipe, "--output", f"{out}/run",
                   "--time-limit-min", str(args.minutes), "--no-auto-steps", "--max-steps", "1000000", *args.extra]
        if args.data_dir:
            command += ["--data-dir", args.data_dir]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        samples = sample_rss(proc, args.every, name)
        logged = [json.loads(x) for x in Path(f"{out}/run/metrics.jsonl").read_text().splitlines()]
    if proc.returncode:
        raise SystemExit(f"aiayn train exited with {proc.returncode}")
    used = next(x["malloc"] for x in logged if "malloc" in x)
    if used != ("jemalloc" if malloc == "jemalloc" else "glibc"):
        raise SystemExit(f"--malloc {malloc}: the run used {used} (jemalloc: apt-get install libjemalloc2)")
    if (ratio := growth(samples, args.settle)) is not None:
        emit(name, "rss_growth_after_settle", ratio, "ratio")
    emit(name, "rss_max", max(mb for _, mb in samples), "MB")
    rates = [x["tokens_per_s"] for x in logged if "tokens_per_s" in x]
    emit(name, "steps", max(x.get("step", 0) for x in logged), "steps")
    emit(name, "tokens_per_s", sum(rates) / max(len(rates), 1), "tokens/s")
    quarter = max(len(rates) // 4, 1)
    if len(rates) >= 4:  # the first interval (warm-up of the kernels) left out
        early, late = rates[1:quarter + 1], rates[-quarter:]
        emit(name, "pace_drift", (sum(late) / len(late)) / (sum(early) / len(early)), "ratio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="configs/multi30k-de-en.yaml")
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes of training (time_limit_min)")
    parser.add_argument("--settle", type=float, default=3.0, help="minutes after which memory should stay flat")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--malloc", nargs="+", choices=["jemalloc", "tuned", "default"],
                        default=["jemalloc", "tuned"])
    parser.add_argument("--data-dir", dest="data_dir", default=None)
    parser.add_argument("extra", nargs="*", help="more aiayn train flags (after --)")
    args = parser.parse_args()
    for malloc in args.malloc:
        run_once(args, malloc)


if __name__ == "__main__":
    main()
