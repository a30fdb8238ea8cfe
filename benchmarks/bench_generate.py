"""Generation serving, in process (the scheduler the server runs, without HTTP): continuous batching against
wait-and-batch, and prompt caching across requests. ``bench_serve.py --generate`` runs this.

1. ``--requests`` (200) from ``--clients`` (20) concurrent clients, each request a random prompt of the
   corpus and 16-256 new tokens (EOS forbidden is not needed: lengths are limits, EOS may end earlier):
   requests/s, generated tokens/s, p50/p99 latency, for continuous batching and for static batching (the
   wait-and-batch scheme: a batch forms only when none is running and answers when its last row ends), and
   the throughput ratio.
2. Time to first token for a 512-token shared prefix + a 16-token suffix, prefix cache warm against off
   (median of 10), and the hit rate over 30 requests sharing 3 prefixes.
Prints JSON lines {"config", "metric", "value", "unit"}.

    python benchmarks/bench_generate.py --checkpoint RUN [--requests 200] [--clients 20] [--max-batch 16]
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

import torch
from common import emit

from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.prefix import PromptCache
from aiayn.inference.generator import TextGenerator
from aiayn.serve.jobs import Event, Finished
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import DecodeJob, Scheduler
from aiayn.serve.threads import single_threaded_main


def run_one(batcher: Scheduler, prompt: list[int], new: int, seed: int) -> tuple[float, float, int]:
    """Submit and wait: (latency s, time to first token s, tokens generated)."""
    done, first = threading.Event(), []
    started = time.perf_counter()

    def on_event(event: Event) -> None:
        if not first:
            first.append(time.perf_counter() - started)
        if isinstance(event, Finished):
            done.set()

    job = DecodeJob(prompt, DecodingConfig(strategy="sample", temperature=1.0, seed=seed, max_new_tokens=new), on_event)
    batcher.submit(job)
    done.wait()
    return time.perf_counter() - started, first[0], len(job.generated)


def load(batcher: Scheduler, work: list[tuple[list[int], int]], clients: int) -> dict:
    latencies, tokens, lock, queue = [], [0], threading.Lock(), list(enumerate(work))

    def client() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i, (prompt, new) = queue.pop()
            latency, _, n = run_one(batcher, prompt, new, i)
            with lock:
                latencies.append(latency)
                tokens[0] += n

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    latencies.sort()
    return {"requests_per_s": len(work) / seconds, "tokens_per_s": tokens[0] / seconds,
            "p50_s": latencies[len(latencies) // 2], "p99_s": latencies[int(len(latencies) * 0.99) - 1]}


def batching(gen: TextGenerator, args) -> None:
    rng = random.Random(0)
    text = gen.tokenizer.decode(list(range(5, 60)))  # any text: prompts are cut from the corpus below
    corpus = [line for line in args.prompts.read_text().splitlines() if line.strip()] if args.prompts else [text]
    work = [(gen.prompt_ids(rng.choice(corpus)[:64]), rng.randint(16, 256)) for _ in range(args.requests)]
    tag = f"{args.requests}req/{args.clients}clients/max_batch{args.max_batch}"
    rates = {}
    for name, static in (("continuous", False), ("static", True)):
        batcher = Scheduler(gen.model, args.max_batch, Limits().max_context, static=static,  # as served
                                    threads=args.threads)
        batcher.start()
        try:
            result = load(batcher, work, args.clients)
        finally:
            batcher.stop()
        result["decoding_steps"] = batcher.steps
        for metric, value in result.items():
            unit = metric.split("_per_")[0] + "/s" if "_per_" in metric else "steps" if "steps" in metric else "s"
            emit(f"{tag}/{name}", metric, value, unit)
        rates[name] = result
    emit(tag, "throughput_ratio_continuous_vs_static", rates["continuous"]["tokens_per_s"] /
         rates["static"]["tokens_per_s"], "x")
    emit(tag, "p99_ratio_continuous_vs_static", rates["continuous"]["p99_s"] / rates["static"]["p99_s"], "x")
    emit(tag, "step_ratio_static_vs_continuous", rates["static"]["decoding_steps"] /
         rates["continuous"]["decoding_steps"], "x")  # the throughput ratio if every step cost the same


def prefix_caching(gen: TextGenerator, threads: int) -> None:
    rng = random.Random(1)
    prefixes = [[rng.randrange(5, 60) for _ in range(512)] for _ in range(3)]
    suffix = lambda: [rng.randrange(5, 60) for _ in range(16)]  # noqa: E731
    ttft = {}
    for name, store in (("off", None), ("warm", PromptCache(gen.model))):
        batcher = Scheduler(gen.model, 4, 1024, prefix_cache=store, threads=threads)
        batcher.start()
        try:
            run_one(batcher, prefixes[0] + suffix(), 1, 0)  # warms the cache (and the kernels)
            ttft[name] = statistics.median(run_one(batcher, prefixes[0] + suffix(), 1, i)[1] for i in range(10))
            if store is not None:
                hits_before, misses_before = store.hits, store.misses
                for i in range(30):
                    run_one(batcher, rng.choice(prefixes) + suffix(), 1, i)
                emit("3 prefixes x 30 requests", "prefix_hit_rate",
                     (store.hits - hits_before) / (store.hits + store.misses - hits_before - misses_before), "share")
        finally:
            batcher.stop()
        emit(f"512+16 tokens/prefix cache {name}", "time_to_first_token", ttft[name] * 1000, "ms")
    emit("512+16 tokens", "ttft_speedup_warm_vs_off", ttft["off"] / ttft["warm"], "x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a decoder-only checkpoint or run folder")
    parser.add_argument("--prompts", type=__import__("pathlib").Path, help="text file: prompts are its lines")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--max-batch", type=int, default=16, dest="max_batch")
    parser.add_argument("--only", choices=["batching", "prefix"], help="run one of the two parts")
    args = parser.parse_args()
    args.threads = single_threaded_main()  # as the server: only the decoding thread computes in parallel
    gen = TextGenerator.from_checkpoint(args.checkpoint)
    with torch.no_grad():
        if args.only != "prefix":
            batching(gen, args)
        if args.only != "batching":
            prefix_caching(gen, args.threads)


if __name__ == "__main__":
    main()
