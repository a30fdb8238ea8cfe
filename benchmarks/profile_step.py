"""Where a batch-1 decoding step's time goes, eager and compiled: ``torch.profiler`` over steps of a real model.

Loads the checkpoint at each precision, decodes a short prompt, then profiles ``--steps`` one-token steps (the
step alone: ``model.step`` with a cache, no sampling) and times as many again unprofiled. Prints JSON lines
{"config", "metric", "value", "unit"}: milliseconds a step (unprofiled), operator calls a step (every ``aten::``
call, nested ones counted), the time a step spends inside the matrix products (aiayn's kernels and ATen's
``linear``/``mm``, self time) and inside every operator (the sum of self times), and what is left: Python and the
dispatcher between operators (the profiled step's wall time less its operators' self time; the profiler's own cost
per call lands in both). With ``--top N``, the N operators with the most self time.

    python benchmarks/profile_step.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                      [--precisions fp32 int8 int4] [--steps 20] [--compile] [--top 10]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from common import emit
from torch.profiler import ProfilerActivity, profile

from aiayn.inference.compiled import attach
from aiayn.inference.generator import TextGenerator

PRODUCTS = ("aiayn::", "aten::linear", "aten::mm", "aten::addmm", "aten::_weight_int", "mkldnn")
FLAGS = {"fp32": {}, "bf16": {"bf16": True}, "int8": {"int8": True}, "int4": {"int4": True}}


@torch.no_grad()
def steps(model, n: int, prompt: int = 32, around=contextlib.nullcontext) -> float:
    """A prompt of ``prompt`` tokens, then ``n`` one-token steps (inside ``around()``): seconds a step."""
    tokens, state = model.start(torch.randint(10, 1000, (1, prompt)), 2 * n + 2)
    model.step(tokens, state, last=True)
    with around():
        start = time.perf_counter()
        for _ in range(n):
            tokens = torch.cat([tokens, tokens[:, -1:]], dim=1)
            model.step(tokens, state, last=True)
        return (time.perf_counter() - start) / n


def profiled(model, n: int) -> tuple[list, float]:
    """The profiler's per-operator totals over ``n`` steps (the prompt's pass left out) and the seconds a step
    took under it."""
    prof = profile(activities=[ProfilerActivity.CPU])
    seconds = steps(model, n, around=lambda: prof)
    return prof.key_averages(), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8", "int4"], choices=tuple(FLAGS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true", help="the compiled step (its graph kept or compiled)")
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    for name in args.precisions:
        model = TextGenerator.from_checkpoint(args.checkpoint, **FLAGS[name]).model
        if args.compile:
            attach(model, "on")
        config = f"{name}/{'compiled' if args.compile else 'eager'}"
        steps(model, args.steps)  # warm-up
        wall = min(steps(model, args.steps) for _ in range(3)) * 1000
        averages, seconds = profiled(model, args.steps)
        events = [e for e in averages if e.key.startswith(("aten::", "aiayn::", "mkldnn"))]
        self_ms = sum(e.self_cpu_time_total for e in events) / 1000 / args.steps
        product_ms = sum(e.self_cpu_time_total for e in events if e.key.startswith(PRODUCTS)) / 1000 / args.steps
        emit(config, "ms_per_step", wall, "ms")
        emit(config, "ms_per_step_profiled", seconds * 1000, "ms")
        emit(config, "operator_calls_per_step", sum(e.count for e in events) / args.steps, "calls")
        emit(config, "products_ms_per_step", product_ms, "ms")
        emit(config, "operators_self_ms_per_step", self_ms, "ms")
        emit(config, "between_operators_ms_per_step", seconds * 1000 - self_ms, "ms")
        for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]:
            emit(f"{config}/{e.key}", "self_ms_per_step", e.self_cpu_time_total / 1000 / args.steps, "ms")
            emit(f"{config}/{e.key}", "calls_per_step", e.count / args.steps, "calls")


if __name__ == "__main__":
    main()
