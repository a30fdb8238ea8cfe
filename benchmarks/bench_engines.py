"""Engine against engine on the very same weights: aiayn, transformers, CTranslate2 and llama.cpp, one model preset
at a time, each engine in its own process, one after the other; ratios only within one run.

Presets (what each measures is in its module's docstring):

- translation (``engines_translation.py``): ``small``, ``base`` (aiayn's sizes, random weights, a Marian model of
  the same dimensions) and ``opus-mt`` (an OPUS-MT-shaped Marian folder, imported): generated tokens/s, greedy
  and beam 4, cache on and off, float32, bfloat16 and int8; engines aiayn, hf, ct2.
- language models (``engines_lm.py``): ``smollm2`` and ``gemma3`` (the real SmolLM2-135M-Instruct or Gemma 3 270M
  from ``--gguf``), ``qwen-shape``
  (random, Qwen2.5-0.5B's shape) and ``llama`` (random, d 512): decode and prefill tokens/s, peak RSS, the
  share of memory bandwidth, at fp32, bf16, int8 and int4; engines aiayn, hf, ct2, llama.cpp.

Prints JSON lines {"config", "metric", "value", "unit"}. ``transformers`` and ``ctranslate2`` come with
``pip install -e '.[bench]'``; an engine that is not installed is skipped and named.

    python benchmarks/bench_engines.py --preset small base [--engines aiayn hf ct2] [--min-seconds 1] [--repeats 2]
    python benchmarks/bench_engines.py --preset opus-mt
    python benchmarks/bench_engines.py --preset smollm2 --gguf ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
    python benchmarks/bench_engines.py --preset qwen-shape llama [--engines aiayn hf llama.cpp] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import engines_lm
import engines_translation
from common import available


def worker(argv: list[str]) -> None:
    """One engine measured in this process: ``translation ENGINE PRESET [--min-seconds S] [--opus-mt-folder D]``
    or ``lm ENGINE PRECISION WORK NEW_TOKENS``; its figures printed as JSON lines."""
    kind, rest = argv[0], argv[1:]
    if kind == "lm":
        engine, precision, work, new_tokens = rest
        engines_lm.worker(engine, precision, Path(work), int(new_tokens))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("engine")
    parser.add_argument("preset")
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--opus-mt-folder", type=Path)
    args = parser.parse_args(rest)
    engines_translation.worker(args.engine, args.preset, args.min_seconds, args.opus_mt_folder)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="+", default=["small", "base"],
                        choices=[*engines_translation.PRESETS, *engines_lm.PRESETS])
    parser.add_argument("--engines", nargs="+", default=["aiayn", "hf", "ct2", "llama.cpp"],
                        choices=["aiayn", "aiayn-compiled", "hf", "ct2", "llama.cpp"],
                        help="aiayn-compiled: language models, aiayn with its compiled decoding step (--compile on)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="translation: time each case this long")
    parser.add_argument("--repeats", type=int, default=1, help="engines take this many turns (language models: "
                        "one precision's engines one after another); each figure the best")
    parser.add_argument("--gguf", help="smollm2: the GGUF file (scripts/fetch_smollm2.py fetches it)")
    parser.add_argument("--new-tokens", type=int, default=64, help="language models: new tokens per timing")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8", "int4"],
                        choices=["fp32", "bf16", "int8", "int4"], help="language models: these precisions")
    args = parser.parse_args()
    if {"smollm2", "gemma3"} & set(args.preset) and not args.gguf:
        parser.error("--preset smollm2 and gemma3 need --gguf FILE (scripts/fetch_smollm2.py, fetch_gemma3.py)")
    engines = available(["aiayn", *[e for e in args.engines if e != "aiayn"]])
    translation = [p for p in args.preset if p in engines_translation.PRESETS]
    if translation:
        engines_translation.run(translation, [e for e in engines if e not in ("llama.cpp", "aiayn-compiled")],
                                args.min_seconds, args.repeats, __file__)
    for preset in (p for p in args.preset if p in engines_lm.PRESETS):
        lm = argparse.Namespace(model=preset, gguf=args.gguf, engines=engines, new_tokens=args.new_tokens,
                                precisions=args.precisions, script=__file__, repeats=args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            engines_lm.run(lm, Path(tmp))


if __name__ == "__main__":
    main()
