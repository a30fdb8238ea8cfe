"""What a long cache costs a short text at batch 1: ms a token of greedy steps through ``model.step`` for
prompts and cache capacities of several lengths, the decoding step compiled (``--compile on``) or eager.

A cache is allocated for the prompt and every new token a request may make; the compiled step attends a full
layer's slots up to its span past the column (``model/static.py::span_of``), the eager one the written slots.

    python benchmarks/bench_static_span.py --checkpoint runs/smollm2 [--precision int4] [--compile on|off]
"""

from __future__ import annotations

import argparse
import time

import torch
from common import emit

CASES = ((16, 256), (16, 4096), (1000, 4096), (3900, 4096), (1000, 1100))  # (prompt, cache capacity) columns


@torch.no_grad()
def ms_a_token(model, prompt: int, capacity: int, steps: int = 24) -> float:
    """Milliseconds a greedy step after a random ``prompt`` in a cache of ``capacity`` columns, after 3 warm steps."""
    tokens, state = model.start(torch.randint(100, 1000, (1, prompt)), capacity - prompt)
    logits = model.step(tokens, state, last=True)
    for step in range(3 + steps):
        if step == 3:
            start = time.perf_counter()
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        logits = model.step(tokens, state, last=True)
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--precision", default="int4", choices=["fp32", "int8", "int4"])
    parser.add_argument("--compile", default="on", choices=["on", "off"], dest="compile_mode")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from aiayn.inference.compiled import attach
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import converter, inference_copy

    options = {"int8": args.precision == "int8", "int4": args.precision == "int4", "few_rows": True}  # as products
    model, _ = load_checkpoint(args.checkpoint, convert=converter(**options))
    model = inference_copy(model.eval(), own=True, **options)
    attach(model, args.compile_mode)
    for prompt, capacity in CASES:
        emit(f"{args.precision}/compile-{args.compile_mode}/prompt{prompt}/capacity{capacity}", "step",
             ms_a_token(model, prompt, capacity), "ms a token")


if __name__ == "__main__":
    main()
