"""``aiayn serve --models DIR`` (``serve/models.py``): how long switching to a model loaded before takes, and a burst
for three models in a two-model budget.

The folder holds the checkpoint three times under three names (symbolic links: three models as the server sees
them). ``--models-max 1``: a request for "a", then "b" (which unloads "a"), then "a" again: the last request's
time, the server's own load time for it (/health's ``last_load_s``), and the same request once loaded (the
difference is the switch). Then ``--models-max 2`` and ``--clients`` clients asking "a", "b", "c" in turn, three
requests each: requests answered 200 and lost (anything else), and the most models loaded at once.

Prints JSON lines {"config", "metric", "value", "unit"}.

    python benchmarks/bench_models_server.py --checkpoint /tmp/smollm2 [--flags "--int4"] [--clients 8]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shlex
import tempfile
import time
from pathlib import Path

import httpx
from common import emit, start_server


def ask(url: str, model: str) -> tuple[int, float]:
    start = time.perf_counter()
    r = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": "The capital of France is",
                                                   "max_tokens": 8, "temperature": 0}, timeout=600)
    return r.status_code, time.perf_counter() - start


def switching(folder: Path, flags: list[str], config: str) -> None:
    server = start_server("models", "", "--models", str(folder), "--models-max", "1", *flags)
    try:
        url = server.url
        ask(url, "a")
        ask(url, "b")
        status, switch = ask(url, "a")  # "a" loaded before, unloaded for "b"
        load = httpx.get(f"{url}/health").json()["last_load_s"]["a"]
        steady = min(ask(url, "a")[1] for _ in range(3))
        emit(config, "switch_to_a_model_loaded_before", round(switch, 3), "s")
        emit(config, "its_load", load, "s")
        emit(config, "the_same_request_loaded", round(steady, 3), "s")
        emit(config, "switch_status", status, "http")
    finally:
        server.proc.terminate()
        server.proc.wait(60)


def burst(folder: Path, flags: list[str], clients: int, config: str) -> None:
    server = start_server("models", "", "--models", str(folder), "--models-max", "2", *flags)
    try:
        order = [m for _ in range(clients) for m in "abc"]
        with concurrent.futures.ThreadPoolExecutor(clients) as ex:
            answers = list(ex.map(lambda m: ask(server.url, m), order))
        health = httpx.get(f"{server.url}/health").json()
        emit(config, "requests", len(answers), "requests")
        emit(config, "answered_200", sum(s == 200 for s, _ in answers), "requests")
        emit(config, "lost", sum(s != 200 for s, _ in answers), "requests")
        emit(config, "most_loaded_at_once", health["most_loaded_at_once"], "models")
        emit(config, "loads", sum(health["loads"].values()), "loads")
        emit(config, "slowest", round(max(t for _, t in answers), 2), "s")
    finally:
        server.proc.terminate()
        server.proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a checkpoint folder or a GGUF file")
    parser.add_argument("--flags", default="--compile off", help="more flags for aiayn serve")
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    flags = shlex.split(args.flags)
    source = Path(args.checkpoint).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        for name in "abc":
            (Path(tmp) / (name + (".gguf" if source.suffix == ".gguf" else ""))).symlink_to(source)
        config = f"{source.name}/{' '.join(flags)}"
        switching(Path(tmp), flags, config)
        burst(Path(tmp), flags, args.clients, config)


if __name__ == "__main__":
    main()
