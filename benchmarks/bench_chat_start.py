"""How long `aiayn chat` takes from its start to the first byte of its first reply, eager and compiled.

For each run, ``aiayn chat --checkpoint RUN --int4 --compile off`` and then ``--compile on`` each get one question
on standard input (then end of input) and reply greedily; prints JSON lines: the seconds to the reply's first byte
of each, and compiled / eager. The first run with ``--compile on`` compiles (unless aiayn's cache folder keeps the
graph already); later runs load the kept graph: that is the warm start.

    python benchmarks/bench_chat_start.py --checkpoint runs/smollm2 [--runs 2] [--precision-flag --int4]
    python benchmarks/bench_chat_start.py --checkpoint runs/smollm2 --precision-flag ""   # float32
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from common import emit


def first_reply(checkpoint: str, precision: str, mode: str) -> float:
    """Seconds from starting ``aiayn chat`` to the first byte it writes to standard output (its reply)."""
    start = time.perf_counter()
    flags = [precision] if precision else []  # "": float32
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "chat", "--checkpoint", checkpoint, *flags,
                             "--compile", mode, "--max-new-tokens", "8", "--temperature", "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdin.write(b"What is the capital of France?\n")
    proc.stdin.close()
    byte = proc.stdout.read(1)
    seconds = time.perf_counter() - start
    proc.stdout.read()
    if proc.wait() != 0 or not byte:
        raise SystemExit(f"aiayn chat --compile {mode} failed (exit {proc.returncode})")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--precision-flag", default="--int4", dest="precision")
    args = parser.parse_args()
    for run in range(1, args.runs + 1):
        seconds = {mode: first_reply(args.checkpoint, args.precision, mode) for mode in ("off", "on")}
        for mode, value in seconds.items():
            emit(f"run{run}/compile-{mode}", "first_reply", value, "s (start to the reply's first byte)", 2)
        emit(f"run{run}", "compiled_vs_eager", seconds["on"] / seconds["off"], "x")


if __name__ == "__main__":
    main()
