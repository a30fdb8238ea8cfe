"""What choosing a token costs beside the decoding step: ``draw`` (temperature, top-k, top-p, min-p, then one
seeded draw) on one row of scores of a real vocabulary's size, and a real model's new tokens/s sampled and greedy.

Part 1 times ``aiayn.decoding.sampling.draw`` with each filter, and top-p's two ways side by side:
``top_p_filter`` (the likeliest tokens ranked a few at a time) and ``top_p_sorted`` (the whole vocabulary
sorted: the reference it is tested against), on scores of SmolLM2's width (49,153 columns, the last a padding
row): a peaked row (a nucleus of tens of tokens at top-p 0.9) and a flat one (thousands).
Part 2 (with ``--checkpoint``) loads the model as ``aiayn generate`` does (``--precision``, its step compiled
under ``--compile on``) and times ``generate`` of ``--new-tokens`` tokens greedy and sampled (temperature 0.7,
top-p 0.9: a chat's usual settings), the best of ``--repeats``.

    python benchmarks/bench_sampling.py [--checkpoint runs/smollm2] [--precision int4] [--compile on]
"""

from __future__ import annotations

import argparse
import functools

import torch
from common import best_of, emit

FILTERS = {"temperature": dict(temperature=0.7), "top_p": dict(temperature=0.7, top_p=0.9),
           "top_k": dict(temperature=0.7, top_k=50), "min_p": dict(temperature=0.7, min_p=0.05),
           "top_p_flat": dict(temperature=4.0, top_p=0.95)}


def scores(vocab: int = 49_153) -> torch.Tensor:
    """One row of scores (1, V): normal with a spread of 4, so that at temperature 0.7 a few tokens hold most of
    the probability, as a language model's next token mostly does."""
    return torch.randn(1, vocab, generator=torch.Generator().manual_seed(0)) * 4.0


def per_call(repeats: int, fn, *args, **kwargs) -> float:
    """Milliseconds a call of ``fn(*args, **kwargs)``, the best of ``repeats`` rounds of 50 calls."""
    call = functools.partial(fn, *args, **kwargs)
    return best_of(repeats, lambda: [call() for _ in range(50)]) / 50 * 1e3


def time_draws(repeats: int) -> None:
    from aiayn.decoding.sampling import draw, top_p_filter, top_p_sorted

    x, g = scores(), torch.Generator().manual_seed(0)
    for name, options in FILTERS.items():
        if "top_p" in options:
            scaled = x[:, :-1] / options["temperature"]
            for fn in (top_p_filter, top_p_sorted):
                emit(f"draw/{name}", fn.__name__, per_call(repeats, fn, scaled, options["top_p"]), "ms")
        ms = per_call(repeats, draw, x, g, pad_last=True, **options)
        emit(f"draw/{name}", "draw", ms, "ms (filter, softmax, one seeded draw)")


def time_generation(checkpoint: str, precision: str, compile_mode: str, new_tokens: int, repeats: int) -> None:
    from aiayn import generate
    from aiayn.inference.compiled import attach
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import converter, inference_copy

    options = {"int8": precision == "int8", "int4": precision == "int4", "few_rows": True}  # as products convert
    model, tokenizers = load_checkpoint(checkpoint, convert=converter(**options))
    model = inference_copy(model.eval(), own=True, **options)
    attach(model, compile_mode)
    ids = torch.tensor([tokenizers.src.encode("Once upon a time, in a small village by the sea,")])
    rates = {}
    for kind, extra in {"greedy": {}, "sample": dict(temperature=0.7, top_p=0.9, seed=0)}.items():
        run = functools.partial(generate, model, ids, kind, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                **extra)
        run()  # warm
        rates[kind] = new_tokens / best_of(repeats, run)
        emit(f"generate/{precision}/compile-{compile_mode}/{kind}", "tokens_per_s", rates[kind], "tokens/s")
    emit(f"generate/{precision}/compile-{compile_mode}", "sample_vs_greedy", rates["sample"] / rates["greedy"], "x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a language model's checkpoint for part 2 (e.g. runs/smollm2)")
    parser.add_argument("--precision", default="int4", choices=["fp32", "int8", "int4"])
    parser.add_argument("--compile", default="on", choices=["on", "off"], dest="compile_mode")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    time_draws(args.repeats)
    if args.checkpoint:
        time_generation(args.checkpoint, args.precision, args.compile_mode, args.new_tokens, args.repeats)


if __name__ == "__main__":
    main()
