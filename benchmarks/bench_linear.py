"""The matrix products of one decoding step: plain ``nn.Linear`` against oneDNN-prepacked (``aiayn.pack``).

The 48 linear layers of a ``base`` decoder step with a cache (per layer: self-attention Q, K, V, O;
cross-attention Q, O; the two FFN layers), random float32 weights, at 1, 16 and 64 rows (greedy batch 1 and
16, beam 4 x batch 16). Prints JSON lines {"config", "metric", "value", "unit"}: milliseconds per step for
each, the speedup, and the largest difference between the two outputs.

    python benchmarks/bench_linear.py [--rows 1 16 64] [--steps 20]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
from common import emit as print_figure
from torch import nn

from aiayn.model.packed import PackedLinear

D_MODEL, D_FF, LAYERS = 512, 2048, 6


emit = partial(print_figure, digits=6)


def decoder_linears() -> list[nn.Linear]:
    per_layer = [(D_MODEL, D_MODEL)] * 6 + [(D_MODEL, D_FF), (D_FF, D_MODEL)]  # (in, out)
    return [nn.Linear(i, o) for _ in range(LAYERS) for i, o in per_layer]


def ms_per_step(layers: list[nn.Module], inputs: dict[int, torch.Tensor], steps: int) -> float:
    def step() -> None:
        for layer in layers:
            layer(inputs[layer.in_features])
    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    plain = decoder_linears()
    packed = [PackedLinear(layer) for layer in plain]
    for rows in args.rows:
        inputs = {n: torch.randn(rows, n) for n in (D_MODEL, D_FF)}
        config = f"base-decoder-linears/rows{rows}/fp32"
        diff = max(float((p(inputs[p.in_features]) - q(inputs[q.in_features])).abs().max())
                   for p, q in zip(packed, plain, strict=True))
        a, b = ms_per_step(plain, inputs, args.steps), ms_per_step(packed, inputs, args.steps)
        emit(f"{config}/nn.Linear", "ms_per_step", a, "ms")
        emit(f"{config}/packed", "ms_per_step", b, "ms")
        emit(config, "speedup_packed_vs_nn_linear", a / b, "x")
        emit(config, "max_abs_difference", diff, "")


if __name__ == "__main__":
    main()
