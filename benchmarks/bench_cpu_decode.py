"""Batch-1 decoding on this CPU, aiayn beside llama.cpp on the same GGUF files, for the models people run now:
Gemma 3 270M (the real one, ``make gemma3``), a random Qwen3-0.6B-shaped model and a random Qwen3-30B-A3B-shaped
mixture of experts (128 experts, 8 a token; 2 of its 48 layers, to fit memory). ``bench_engines.py``'s language
model presets (``engines_lm.py``) with the engines aiayn (eager, and with ``--compile on``: ``aiayn-compiled``) and
llama.cpp (``pip install llama-cpp-python``): each
model imported, exported with ``aiayn export --format gguf`` at each precision (F32, BF16, Q8_0, Q4_0 for llama.cpp;
aiayn's float32, bfloat16, weight-only int8 and int4 of the same checkpoint), every engine and precision in its own
process; ``decode_vs_llama.cpp`` is aiayn's tokens/s over llama.cpp's from the same run.

Prints JSON lines {"config", "metric", "value", "unit"}, first the CPU's and the paths aiayn chose on it: whether it
computes in bfloat16 (its instruction flags: ``native_bf16``) and the activations of ``--int8`` and ``--int4``.

    python benchmarks/bench_cpu_decode.py [--models gemma3 qwen3-shape qwen3-moe-shape] [--precisions bf16 int8 int4]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import engines_lm
from common import available, emit

MODELS = ("gemma3", "qwen3-shape", "qwen3-moe-shape")
GEMMA = Path.home() / ".cache" / "aiayn" / "gemma-3-270m-q4_k_m.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8", "int4"],
                        choices=["fp32", "bf16", "int8", "int4"])
    parser.add_argument("--gguf", type=Path, default=GEMMA, help="gemma3: the GGUF file (make gemma3)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1, help="one precision's engines take this many turns, one "
                        "after another; each figure the best")
    args = parser.parse_args()
    if "gemma3" in args.models and not args.gguf.exists():
        parser.error(f"{args.gguf}: missing; run make gemma3, or leave gemma3 out of --models")
    cpu_paths()
    engines = available(["aiayn", "aiayn-compiled", "llama.cpp"])
    for model in args.models:
        lm = argparse.Namespace(model=model, gguf=str(args.gguf), engines=engines, new_tokens=args.new_tokens,
                                precisions=args.precisions, script=str(Path(__file__).with_name("bench_engines.py")),
                                repeats=args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            engines_lm.run(lm, Path(tmp))


def cpu_paths() -> None:
    """The CPU and what aiayn chose on it, as figures of this run."""
    import torch
    from torch import nn

    from aiayn.model.cpu import native_bf16
    from aiayn.model.quantized import Int4Linear, Int8Linear

    emit("cpu", "name", torch.cpu.get_capabilities().get("cpu_name", "unknown"), "")
    emit("cpu", "native_bf16", native_bf16(), "AVX512-BF16, AMX-BF16, AVX-NE-CONVERT or AArch64 BF16")
    int8, int4 = Int8Linear(nn.Linear(32, 16)), Int4Linear(nn.Linear(32, 16))
    emit("cpu", "int8_activations", "int8" if int8.w8a8 else "bfloat16", "")
    emit("cpu", "int4_activations", "int8" if int4.w4a8 else str(int4.dtype).removeprefix("torch."), "")
    emit("cpu", "int8_kernel", int8.kernel, "")
    emit("cpu", "int4_kernel", int4.kernel, "")


if __name__ == "__main__":
    main()
