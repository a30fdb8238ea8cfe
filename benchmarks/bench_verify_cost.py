"""What a verifying pass costs against a plain step, by rows and columns: the arithmetic behind turning speculation
down under load (``decoding/drafted.py``'s ``GUESSING_ROWS``).

A batch of ``rows`` rows, each a prompt of ``--context`` tokens already in the KV cache, takes one pass of
``columns`` new tokens a row (1: a plain step; more: the last token and ``columns - 1`` guesses), the cache rolled
back after each so every pass sees the same context. Prints JSON lines {"config", "metric", "value", "unit"}:
milliseconds a pass (the best of ``--repeats`` rounds of ``--passes`` passes) and the pass against the plain step
of as many rows: the break-even, how many tokens a row must keep a pass (the model's own one included) for the
passes to make tokens as fast as plain steps do (a draft's own cost not counted: prompt lookup's is next to none).

    python benchmarks/bench_verify_cost.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                           [--rows 1 4 8] [--columns 1 2 3 5] [--compile]
"""

from __future__ import annotations

import argparse
import time

import torch
from common import emit

from aiayn.inference.compiled import attach
from aiayn.inference.generator import TextGenerator


@torch.no_grad()
def pass_ms(model, rows: int, columns: int, context: int, passes: int, repeats: int) -> float:
    """The best of ``repeats`` rounds: milliseconds a pass of ``columns`` new tokens for each of ``rows`` rows."""
    prompt = torch.randint(10, 1000, (rows, context))
    tokens, state = model.start(prompt, columns + 1)
    model.step(tokens, state, last=True)
    fed = torch.cat([tokens, torch.randint(10, 1000, (rows, columns))], dim=1)  # (rows, context + columns)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(passes):
            model.step(fed, state)
            state.cache.truncate(context)
        best = min(best, (time.perf_counter() - start) / passes)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--columns", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="one row's passes through the compiled step (its "
                        "graph of one token and of several)")
    args = parser.parse_args()
    model = TextGenerator.from_checkpoint(args.checkpoint).model
    if args.compile:
        attach(model, "on", batches=True, columns=True)
    for rows in args.rows:
        plain = None
        for columns in sorted(args.columns):
            ms = pass_ms(model, rows, columns, args.context, args.passes, args.repeats)
            plain = ms if columns == 1 else plain
            config = f"rows{rows}/columns{columns}/context{args.context}{'/compiled' if args.compile else ''}"
            emit(config, "ms_per_pass", ms, "ms")
            if plain is not None and columns > 1:
                emit(config, "pass_vs_plain_step", ms / plain, "x")  # = the tokens a row must keep a pass to break even


if __name__ == "__main__":
    main()
