"""What the reduced precisions cost in quality, aiayn beside llama.cpp on the same model (SmolLM2-135M-Instruct
from its GGUF file, imported with ``aiayn import``; llama.cpp reads ``aiayn export --format gguf`` files of it).

- ``perplexity``: exp(mean next-token NLL) over held-out text (the validation tenth of Tiny Shakespeare,
  ``../shared/data/tinyshakespeare``), non-overlapping windows of 512 tokens, every token after a window's
  first scored; the same token ids for every engine (aiayn's tokenizer).
- ``greedy_agreement``: greedy continuations (32 tokens) of prompts from Multi30K's test captions (their first
  four words), compared with aiayn float32's: the share of continuations identical throughout
  (``greedy_identical``) and the mean share of tokens before the first difference (``greedy_prefix``).

Precisions: aiayn float32 (the reference), bfloat16 (``--bf16``), int8 (``--int8``: aiayn's int8 x int8 kernel,
a scale per group of 32, where it builds, else this CPU's choice of PyTorch's; ``int8-a8`` and ``int8-a16`` force
PyTorch's, one scale a row, with int8 or bfloat16 activations), int4 (``--int4``: aiayn's int4 x int8 kernel where it
builds; ``int4-a16`` forces PyTorch's kernel, bfloat16 or float32 activations);
llama.cpp F32, Q8_0, Q4_0 (``llama-cpp-python``, when installed). JSON lines {"config", "metric", "value",
"unit"}. Not timed (``bench_engines.py`` times).

    python benchmarks/bench_quant_quality.py --gguf ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import gzip
import math
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from common import emit as print_figure

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
WINDOW, NEW_TOKENS = 512, 32
AIAYN = {"fp32": {}, "bf16": {"bf16": True}, "int8": {"int8": True},
         "int8-a8": {"int8": True, "w8a8": True, "kernels": False},
         "int8-a16": {"int8": True, "w8a8": False, "kernels": False}, "int4": {"int4": True},
         "int4-a16": {"int4": True, "kernels": False}}
LLAMA_CPP = {"fp32": "f32", "int8": "q8_0", "int4": "q4_0"}


emit = partial(print_figure, digits=None)


def held_out_windows(tokenizer, windows: int) -> list[list[int]]:
    """``windows`` windows of WINDOW token ids from Tiny Shakespeare's validation tenth."""
    with gzip.open(DATA / "tinyshakespeare" / "input.txt.gz", "rt", encoding="utf-8") as f:
        text = f.read()
    ids = tokenizer.encode(text[int(len(text) * 0.9):])
    return [ids[i * WINDOW:(i + 1) * WINDOW] for i in range(min(windows, len(ids) // WINDOW))]


def prompts(tokenizer, n: int) -> list[list[int]]:
    with gzip.open(DATA / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    return [tokenizer.encode(" ".join(line.split()[:4])) for line in lines[:n]]


def perplexity(logits_of, windows: list[list[int]]) -> float:
    """exp of the mean NLL of each window's tokens after its first; ``logits_of(ids)`` -> (T, V) float32."""
    total, count = 0.0, 0
    for ids in windows:
        logits = logits_of(ids)[:-1]  # (T-1, V): predictions of tokens 1..T-1
        target = torch.tensor(ids[1:])
        total += float(F.cross_entropy(logits.float(), target, reduction="sum"))
        count += len(ids) - 1
    return math.exp(total / count)


def aiayn_engine(checkpoint: Path, options: dict):
    from aiayn import generate
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import inference_copy
    from aiayn.model import cpu

    model, _ = load_checkpoint(checkpoint)
    options = dict(options)
    w8a8, ours = options.pop("w8a8", None), options.pop("kernels", None)
    choices = cpu.native_bf16, cpu.kernels_available
    if w8a8 is not None:
        cpu.native_bf16 = lambda: not w8a8  # Int8Linear's activations, whatever this CPU has
    if ours is not None:
        cpu.kernels_available = lambda: ours  # aiayn's kernels or PyTorch's
    try:
        model = inference_copy(model.eval(), **options)
    finally:
        cpu.native_bf16, cpu.kernels_available = choices

    def logits_of(ids: list[int]) -> torch.Tensor:
        return model(torch.tensor([ids]))[0]  # (T, V)

    def greedy(ids: list[int]) -> list[int]:
        return generate(model, torch.tensor([ids]), "greedy", max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)[0]
    return logits_of, greedy


def llama_cpp_engine(path: Path):
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=WINDOW + NEW_TOKENS + 16, n_batch=WINDOW, logits_all=True,
                n_threads=torch.get_num_threads(), verbose=False)

    def logits_of(ids: list[int]) -> torch.Tensor:
        llm.reset()
        llm.eval(ids)
        return torch.from_numpy(llm.scores[: len(ids)].copy())  # (T, V)

    def greedy(ids: list[int]) -> list[int]:
        out = []
        for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
            out.append(token)
            if len(out) == NEW_TOKENS:
                return out
        return out
    return logits_of, greedy


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def measure(config: str, engine, windows, starts, reference: list[list[int]] | None) -> list[list[int]]:
    logits_of, greedy = engine
    with torch.inference_mode():
        emit(config, "perplexity", round(perplexity(logits_of, windows), 3), f"tinyshakespeare val, {WINDOW}-token "
             f"windows x {len(windows)}")
        outputs = [greedy(ids) for ids in starts]
    if reference is not None:
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        prefix = [_common_prefix(a, b) / NEW_TOKENS for a, b in zip(outputs, reference, strict=True)]
        emit(config, "greedy_identical", round(same / len(starts), 3), f"of {len(starts)} continuations")
        emit(config, "greedy_prefix", round(sum(prefix) / len(prefix), 3), f"of {NEW_TOKENS} tokens, mean")
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, help="SmolLM2's GGUF file (scripts/fetch_smollm2.py fetches it)")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--through-kernels", action="store_true",
                        help="score the perplexity's windows through the decoding kernels (each row as a decoding "
                             "step computes it) rather than through the prompt's dequantized weights")
    parser.add_argument("--precisions", nargs="+", choices=list(AIAYN), default=list(AIAYN),
                        help="aiayn's precisions to score (float32, the reference, always)")
    parser.add_argument("--aiayn-only", action="store_true", help="leave llama.cpp out")
    args = parser.parse_args()
    if args.through_kernels:
        from aiayn.model import cpu

        cpu.MATVEC_ROWS = 1 << 30
    from aiayn.tokenizers import load_tokenizers

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = [sys.executable, "-m", "aiayn"]
        subprocess.run([*run, "import", args.gguf, "--output", str(work / "aiayn")], check=True,
                       stdout=subprocess.DEVNULL)
        tokenizer = load_tokenizers(work / "aiayn").src
        windows, starts = held_out_windows(tokenizer, args.windows), prompts(tokenizer, args.prompts)
        reference = None
        for precision in ["fp32", *(p for p in args.precisions if p != "fp32")]:  # float32 first: the reference
            engine = aiayn_engine(work / "aiayn", AIAYN[precision])
            outputs = measure(f"smollm2/aiayn/{precision}", engine, windows, starts, reference)
            reference = reference or outputs
        if args.aiayn_only:
            return
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            emit("llama.cpp", "skipped", "pip install llama-cpp-python", "")
            return
        for precision, kind in LLAMA_CPP.items():
            path = work / f"{kind}.gguf"
            subprocess.run([*run, "export", "--checkpoint", str(work / "aiayn"), "--format", "gguf", "--quantization",
                            kind, "--output", str(path)], check=True, stdout=subprocess.DEVNULL)
            measure(f"smollm2/llama.cpp/{precision}", llama_cpp_engine(path), windows, starts, reference)


if __name__ == "__main__":
    main()
