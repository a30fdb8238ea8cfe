"""Server load: 500 requests from 50 concurrent clients against a live local `aiayn serve`.

Prints JSON lines {"config", "metric", "value", "unit"}: requests/s, p50 and p99 latency, and the error count
(must be 0). With ``--checkpoint`` it starts the server itself, once with dynamic batching (``--max-batch
32``) and once without (``--max-batch 1``), and prints the ratio; with ``--url`` it loads a running server.

    python benchmarks/bench_serve.py --checkpoint RUN [--input FILE] [--requests 500] [--clients 50]
    python benchmarks/bench_serve.py --url http://127.0.0.1:8000
    python benchmarks/bench_serve.py --generate --checkpoint LM_RUN   (see bench_generate.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time

import httpx

from aiayn.data.corpus import read_lines

SENTENCES = ["Ein Mann fährt mit dem Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
             "Kinder spielen am Strand.", "Ein Mann in einem roten Hemd steht auf einer Leiter."]


def emit(config: str, metric: str, value: float, unit: str) -> None:
    print(json.dumps({"config": config, "metric": metric, "value": round(value, 3), "unit": unit}), flush=True)


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
    cuts = statistics.quantiles(latencies, n=100)
    emit(name, "requests_per_s", rate, "requests/s")
    emit(name, "latency_p50", cuts[49] * 1000, "ms")
    emit(name, "latency_p99", cuts[98] * 1000, "ms")
    emit(name, "errors", errors, "requests")
    return rate


def start_server(checkpoint: str, max_batch: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", checkpoint, "--port",
                             str(port), "--max-batch", str(max_batch)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start within 60 s")


def main() -> None:
    if "--generate" in sys.argv:  # decoder-only serving: continuous batching and prompt caching
        import bench_generate

        sys.argv.remove("--generate")
        bench_generate.main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--checkpoint", help="start `aiayn serve` on this checkpoint (with and without batching)")
    target.add_argument("--url", help="load a server that is already running")
    parser.add_argument("--input", help="sentences to send, one a line (default: five built-in ones)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--beam-size", type=int, default=4, dest="beam_size")
    args = parser.parse_args()
    pool = read_lines(args.input) if args.input else SENTENCES
    texts = [pool[i % len(pool)] for i in range(args.requests)]
    tag = f"{args.requests}req/{args.clients}clients/beam{args.beam_size}"
    if args.url:
        report(tag, *asyncio.run(load(args.url, texts, args.clients, args.beam_size)))
        return
    rates = {}
    for max_batch in (32, 1):
        proc, url = start_server(args.checkpoint, max_batch)
        try:
            rates[max_batch] = report(f"{tag}/max_batch{max_batch}",
                                      *asyncio.run(load(url, texts, args.clients, args.beam_size)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    emit(tag, "speedup_dynamic_batching", rates[32] / rates[1], "x")


if __name__ == "__main__":
    main()
