"""How much memory ``aiayn serve`` holds: its peak and steady RSS once it answers, and after a few requests.

Prints JSON lines {"config", "metric", "value", "unit"}: ``peak_rss`` (VmHWM: the most it ever held, loading
included) and ``rss`` (VmRSS: what it holds now), at start-up and after ``--requests`` chat completions, with the
checkpoint's weight bytes to divide by.

    python benchmarks/bench_serve_memory.py --checkpoint runs/smollm2 [--requests 4] [-- --int8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
from common import emit, start_server


def weight_mb(checkpoint: str) -> float:
    """The checkpoint's safetensors bytes, in MB."""
    folder = Path(checkpoint)
    return sum(f.stat().st_size for f in folder.rglob("*.safetensors")) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("flags", nargs="*", help="more aiayn serve flags (after --)")
    args = parser.parse_args()
    config = " ".join(["serve", *args.flags]) or "serve"
    emit(config, "weights", weight_mb(args.checkpoint), "MB", digits=1)
    server = start_server("memory", args.checkpoint, "--model-name", "m", *args.flags)
    try:
        for metric, value in server.sample().items():
            if metric in ("rss", "peak_rss"):
                emit(f"{config}/started", metric, value, "MB", digits=1)
        for _ in range(args.requests):
            body = {"model": "m", "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 32}
            httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).raise_for_status()
        for metric, value in server.sample().items():
            if metric in ("rss", "peak_rss"):
                emit(f"{config}/after{args.requests}requests", metric, value, "MB", digits=1)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
