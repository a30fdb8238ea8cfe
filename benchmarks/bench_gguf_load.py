"""A GGUF file run as it is against the same file imported first: what ``--int4`` / ``--int8`` cost to load, and how
far their weights are from the file's own.

For each file and precision, three ways to a decoding model, each in a fresh process (its peak resident memory is
that process's):
- ``file``: ``TextGenerator.from_checkpoint(FILE.gguf, int4=True)``: the matrices read a block of rows at a time,
  Q8_0 / Q4_0 / Q4_1 / Q4_K blocks kept as they are (``formats/gguf_rows.py``);
- ``folder``: the same from the folder ``aiayn import`` wrote (float32 on disk, quantized again at each load);
- ``import``: ``aiayn import`` itself, the one-off step the folder needs.
Then ``weight_error``: sum |w - w_file| / sum |w_file| over the decoding layers' weights, for the file's and the
folder's layers (w_file: the file's values in float32, as ``aiayn import`` reads them), and
``logits_error``: the largest |logit - logit_float32| at the end of a prompt, and ``llama_cpp_error`` against
llama.cpp's logits on the same file (with llama-cpp-python). JSON lines {"config", "metric",
"value", "unit"}.

    python benchmarks/bench_gguf_load.py --gguf ~/.cache/aiayn/gemma-3-270m-q4_k_m.gguf --precisions int4 int8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import emit

UNITS = {"weight_error": "sum |w - w_file| / sum |w_file|", "logits_error": "max |logit - float32's|",
         "llama_cpp_error": "max |logit - llama.cpp's| (the file as it is)"}
PROMPT = "The capital of France is Paris, and the capital of Germany is"


def load_once(checkpoint: str, precision: str) -> dict:
    """In this process: load ``checkpoint`` at ``precision``; its seconds and peak resident MiB."""
    import time

    from aiayn.inference.generator import TextGenerator

    start = time.perf_counter()
    TextGenerator.from_checkpoint(checkpoint, **{precision: True})
    seconds = time.perf_counter() - start
    with open("/proc/self/status") as f:  # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return {"seconds": seconds, "peak_mib": peak / 1024}


def in_fresh_process(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def errors(path: Path, folder: Path, precision: str) -> dict:
    """The file's and the folder's layers against the file's float32 values, and their logits against float32's."""
    import torch

    from aiayn.inference.load import load_checkpoint, load_for_use
    from aiayn.inference.precision import converter, fuse
    from aiayn.model.quantized import Int4Linear, Int8Linear

    reference, tokenizers = load_checkpoint(folder)
    ids = torch.tensor([tokenizers.src.encode(PROMPT)])
    with torch.inference_mode():
        exact = reference(ids)[0, -1]
    fuse(reference.requires_grad_(False))
    theirs = llama_cpp_logits(path, ids[0].tolist())
    found = {}
    for way, source in (("file", path), ("folder", folder)):
        model = load_for_use(source, convert=converter(**{precision: True}))[0]
        error = size = 0.0
        for name, layer in model.named_modules():
            if isinstance(layer, Int4Linear | Int8Linear):
                values = reference.get_submodule(name).weight
                error += float((layer.dequantized() - values).abs().sum())
                size += float(values.abs().sum())
        with torch.inference_mode():
            logits = model(ids)[0, -1]
        found[way] = {"weight_error": error / size, "logits_error": float((logits - exact).abs().max())}
        if theirs is not None:
            found[way]["llama_cpp_error"] = float((logits[: theirs.numel()] - theirs).abs().max())
    return found


def llama_cpp_logits(path: Path, ids: list[int]):
    """llama.cpp's logits after ``ids`` on the file as it is (None without llama-cpp-python)."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    import torch

    llm = Llama(model_path=str(path), n_ctx=64, n_threads=torch.get_num_threads(), logits_all=True, verbose=False)
    llm.eval(ids)
    return torch.from_numpy(llm.scores[len(ids) - 1].copy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", nargs="+", default=[], help="GGUF files (make smollm2 gemma3 fetch two)")
    parser.add_argument("--precisions", nargs="+", choices=["int4", "int8"], default=["int4", "int8"])
    parser.add_argument("--child", nargs=2, metavar=("CHECKPOINT", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(load_once(*args.child)))
        return
    for gguf in map(Path, args.gguf):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "imported"
            start = in_fresh_process_import(gguf, folder)
            emit(f"{gguf.stem}/import", "seconds", start, "s (aiayn import, once)")
            for precision in args.precisions:
                for way, checkpoint in (("file", gguf), ("folder", folder)):
                    found = in_fresh_process(str(checkpoint), precision)
                    emit(f"{gguf.stem}/{precision}/{way}", "load_seconds", found["seconds"], "s")
                    emit(f"{gguf.stem}/{precision}/{way}", "peak_rss", round(found["peak_mib"]), "MiB")
                for way, found in errors(gguf, folder, precision).items():
                    for metric, value in found.items():
                        emit(f"{gguf.stem}/{precision}/{way}", metric, value, UNITS[metric], digits=6)


def in_fresh_process_import(gguf: Path, folder: Path) -> float:
    """``aiayn import`` of the file into ``folder``, in its own process: its seconds."""
    import time

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aiayn", "import", str(gguf), "--output", str(folder)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
