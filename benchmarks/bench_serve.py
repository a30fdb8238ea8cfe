"""Server load: 500 requests from 50 concurrent clients against a live local `aiayn serve`.

Prints JSON lines {"config", "metric", "value", "unit"}: requests/s, p50 and p99 latency, and the error count
(must be 0). With ``--checkpoint`` it starts the server itself three times: continuous batching
(``--max-batch`` rows; a beam request takes beam-size rows), wait-and-batch (``--batching static``) and one
request at a time (``--max-batch 1``), and prints the ratios; with ``--url`` it loads a running server.

    python benchmarks/bench_serve.py --checkpoint RUN [--input FILE] [--requests 500] [--clients 50]
    python benchmarks/bench_serve.py --url http://127.0.0.1:8000
    python benchmarks/bench_serve.py --generate --checkpoint LM_RUN   (see bench_generate.py)
    python benchmarks/bench_serve.py --stream --checkpoint LM_RUN [--rates 2 8 inf] [--requests 100]

``--stream``: a language model served the way the field measures one. Requests reach the OpenAI-compatible
``/v1/completions`` (streamed) as a Poisson process at each rate (``inf``: all at once), with prompt and output
lengths drawn log-uniformly (16-``--max-in`` prompt tokens from Tiny Shakespeare, 16-``--max-out`` new tokens:
many short, a few long), the same workload for each server. It starts the server twice, with continuous batching
and with wait-and-batch (``--batching static``), and reports for each rate output tokens/s, requests/s, time to
first token and inter-token latency (p50, p99) and errors, then the ratios. ``--shared-prefix N``: every
prompt starts with the same N-character system prompt (then 16-64 characters of its own), and the two servers
compared are continuous batching with the prefix cache and without it (``--prefix-cache-bytes 0``).
``--peer URL``: the same workload, in the same run, against another OpenAI-compatible server (llama.cpp's,
serving the same weights converted to GGUF: docs/serving.md).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

import httpx
from common import emit, percentile, start_server

from aiayn.data.corpus import read_lines

SENTENCES = ["Ein Mann fährt mit dem Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
             "Kinder spielen am Strand.", "Ein Mann in einem roten Hemd steht auf einer Leiter."]




async def load(url: str, texts: list[str], clients: int, beam_size: int) -> tuple[float, list[float], int]:
    """Send every text as one request from ``clients`` concurrent workers; (seconds, latencies, errors)."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for text in texts:
        queue.put_nowait(text)
    latencies, errors = [], 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while not queue.empty():
            text = queue.get_nowait()
            start = time.perf_counter()
            try:
                response = await client.post(f"{url}/translate", json={"text": text, "beam_size": beam_size})
                errors += response.status_code != 200
            except httpx.HTTPError:
                errors += 1
            latencies.append(time.perf_counter() - start)

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(clients)))
    return time.perf_counter() - start, latencies, errors


def report(name: str, seconds: float, latencies: list[float], errors: int) -> float:
    rate = len(latencies) / seconds
    emit(name, "requests_per_s", rate, "requests/s")
    emit(name, "latency_p50", percentile(latencies, 50) * 1000, "ms")
    emit(name, "latency_p99", percentile(latencies, 99) * 1000, "ms")
    emit(name, "errors", errors, "requests")
    return rate


def workload(n: int, max_in: int, max_out: int, shared_prefix: int = 0, seed: int = 0) -> list[tuple[str, int]]:
    """``n`` (prompt, new tokens): lengths log-uniform (many short, a few long), prompts cut from Tiny
    Shakespeare (a character model's tokens are its characters); with ``shared_prefix``, each prompt is the
    same system prompt of that many characters and 16-64 characters of its own."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare" / "input.txt.gz"
    text = "the quick brown fox jumps over the lazy dog. " * 999
    if shared.exists():
        with gzip.open(shared, "rt") as f:
            text = f.read()
    rng = random.Random(seed)

    def skewed(high: int) -> int:
        return int(math.exp(rng.uniform(math.log(16), math.log(high))))

    system, jobs = text[:shared_prefix], []
    for _ in range(n):
        length = rng.randrange(16, 65) if shared_prefix else skewed(max_in)
        start = rng.randrange(shared_prefix, len(text) - max_in)
        jobs.append((system + text[start: start + length], skewed(max_out)))
    return jobs


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, new: int,
                     model: str = "bench") -> tuple[float, list[float], int]:
    """(time to first token, inter-token gaps, output tokens) of one streamed completion; tokens -1 on error.
    A server that sends no usage chunk: its text chunks are counted as tokens."""
    body = {"model": model, "prompt": prompt, "max_tokens": new, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start, times, tokens = time.perf_counter(), [], -1
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            return 0.0, [], -1
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
    if tokens < 0:
        tokens = len(times)
    if not times:
        return 0.0, [], tokens
    return times[0] - start, [b - a for a, b in itertools.pairwise(times)], tokens


async def poisson(url: str, jobs: list[tuple[str, int]], rate: float, seed: int = 0, model: str = "bench") -> dict:
    """Send ``jobs`` as a Poisson process of ``rate`` requests/s (inf: all at once); the measured figures."""
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=len(jobs))) as client:
        async def send(i: int, prompt: str, new: int, delay: float):
            await asyncio.sleep(delay)
            try:
                return await one_stream(client, url, prompt, new, model)
            except httpx.HTTPError:
                return 0.0, [], -1

        delays, at = [], 0.0
        for _ in jobs:
            delays.append(at)
            at += 0.0 if math.isinf(rate) else rng.expovariate(rate)
        start = time.perf_counter()
        results = await asyncio.gather(*(send(i, p, n, d) for i, ((p, n), d) in enumerate(zip(jobs, delays,
                                                                                               strict=True))))
        seconds = time.perf_counter() - start
    good = [r for r in results if r[2] >= 0]
    ttft = [r[0] for r in good if r[2] > 0]
    gaps = [g for r in good for g in r[1]]

    def pct(values: list[float], q: int) -> float:
        return percentile(values, q) * 1000

    return {"output_tokens_per_s": sum(r[2] for r in good) / seconds, "requests_per_s": len(good) / seconds,
            "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99), "itl_p50_ms": pct(gaps, 50),
            "itl_p99_ms": pct(gaps, 99), "errors": len(results) - len(good)}


def stream_main(args: argparse.Namespace) -> None:
    jobs = workload(args.requests, args.max_in, args.max_out, args.shared_prefix)
    units = {"output_tokens_per_s": "tokens/s", "requests_per_s": "requests/s", "errors": "requests"}
    servers = ({"prefix-cache": [], "no-prefix-cache": ["--prefix-cache-bytes", "0"]} if args.shared_prefix else
               {"continuous": ["--batching", "continuous"], "static": ["--batching", "static"]})
    figures = {}
    for variant, flags in servers.items():
        flags = [*flags, *(["--int8"] if args.int8 else []), "--device", args.device, "--model-name", "bench"]
        server = start_server(variant, args.checkpoint, "--max-batch", str(args.max_batch), *flags, "--max-streams",
                              str(args.requests), "--max-new-tokens", str(args.max_out), "--max-chars", "4000")
        try:
            for rate in args.rates:
                figures[variant, rate] = found = asyncio.run(poisson(server.url, jobs, rate))
                for metric, value in found.items():
                    emit(f"{variant}/rate{rate:g}", metric, value, units.get(metric, "ms"))
        finally:
            server.stop()
    if args.peer:  # another OpenAI-compatible server (llama.cpp's), loaded with the same workload in this run
        model = httpx.get(f"{args.peer}/v1/models").json()["data"][0]["id"]
        for rate in args.rates:
            figures["peer", rate] = found = asyncio.run(poisson(args.peer, jobs, rate, model=model))
            for metric, value in found.items():
                emit(f"peer/rate{rate:g}", metric, value, units.get(metric, "ms"))
        servers["peer"] = []
    ours, theirs, *peer = servers
    for other, rate in [(theirs, r) for r in args.rates] + [(p, r) for p in peer for r in args.rates]:
        a, b = figures[ours, rate], figures[other, rate]
        name = f"{ours}-vs-{other}/rate{rate:g}"
        emit(name, "output_tokens_per_s_ratio", a["output_tokens_per_s"] / b["output_tokens_per_s"], "x")
        emit(name, "ttft_p50_ratio", a["ttft_p50_ms"] / b["ttft_p50_ms"], "x")
        emit(name, "ttft_p99_ratio", a["ttft_p99_ms"] / b["ttft_p99_ms"], "x")


def main() -> None:
    if "--generate" in sys.argv:  # decoder-only serving: continuous batching and prompt caching
        import bench_generate

        sys.argv.remove("--generate")
        bench_generate.main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--checkpoint", help="start `aiayn serve` on this checkpoint (each way of batching)")
    target.add_argument("--url", help="load a server that is already running")
    parser.add_argument("--input", help="sentences to send, one a line (default: five built-in ones)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--beam-size", type=int, default=4, dest="beam_size")
    parser.add_argument("--stream", action="store_true", help="a language model under Poisson arrivals (above)")
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 8.0, math.inf])
    parser.add_argument("--max-in", type=int, default=256, dest="max_in")
    parser.add_argument("--max-out", type=int, default=128, dest="max_out")
    parser.add_argument("--max-batch", type=int, default=16, dest="max_batch")
    parser.add_argument("--device", default="cpu", help="with --stream: the servers' device (cpu or cuda)")
    parser.add_argument("--peer", help="with --stream: also load this OpenAI-compatible server (e.g. llama.cpp's, "
                        "started on the same weights) with the same workload, and give aiayn's ratios to it")
    parser.add_argument("--int8", action="store_true", help="with --stream: the aiayn servers run with --int8 "
                        "(to compare with a Q8_0 peer)")
    parser.add_argument("--shared-prefix", type=int, default=0, dest="shared_prefix",
                        help="characters of a system prompt every request shares (with --stream)")
    args = parser.parse_args()
    if args.stream:
        stream_main(args)
        return
    pool = read_lines(args.input) if args.input else SENTENCES
    texts = [pool[i % len(pool)] for i in range(args.requests)]
    tag = f"{args.requests}req/{args.clients}clients/beam{args.beam_size}"
    if args.url:
        report(tag, *asyncio.run(load(args.url, texts, args.clients, args.beam_size)))
        return
    rows, rates = args.max_batch, {}
    servers = {"continuous": (rows, []), "static": (rows, ["--batching", "static"]), "one-at-a-time": (1, [])}
    for name, (max_batch, flags) in servers.items():
        server = start_server(name, args.checkpoint, "--max-batch", str(max_batch), *flags)
        try:
            rates[name] = report(f"{tag}/{name}", *asyncio.run(load(server.url, texts, args.clients, args.beam_size)))
        finally:
            server.stop()
    emit(tag, "speedup_continuous_vs_static", rates["continuous"] / rates["static"], "x")
    emit(tag, "speedup_continuous_vs_one_at_a_time", rates["continuous"] / rates["one-at-a-time"], "x")

if __name__ == "__main__":
    main()
