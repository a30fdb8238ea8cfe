"""Each quantized layer's storages, measured: does one layout serve every compute path as fast?

``Int8Linear`` and ``Int4Linear`` (``model/quantized.py``) keep one storage each, chosen by the path they run:
aiayn's grouped blocks (llama.cpp's Q8_0 / Q4_1, for ``aiayn::q8a8_mm`` / ``q4a8_mm``) where its kernels build,
PyTorch's own layouts (``_weight_int8pack_mm``'s rows, ``_weight_int4pack_mm_for_cpu``'s packing) where they do not.
The question: could the grouped blocks be the only storage, run without aiayn's kernels by their reference
dequantization (``kernels/quant.py``) and a dense product? For SmolLM2-135M's four matrix shapes, one row (a
decoding step) and 64 rows (a prompt), milliseconds per product of each path, and bytes per weight held.

    python benchmarks/bench_quant_layouts.py [--repeats 20]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import best_of, emit
from torch import nn

from aiayn.kernels import quant
from aiayn.model import cpu
from aiayn.model.quantized import Int4Linear, Int8Linear

SHAPES = ((576, 576), (576, 192), (576, 1536), (1536, 576))  # SmolLM2-135M's (in, out): q/o, k/v, gate/up, down


def held_bytes(layer: nn.Module) -> int:
    """Bytes of the tensors a layer keeps (its storage), bias and scales included."""
    return sum(t.numel() * t.element_size() for t in vars(layer).values() if isinstance(t, torch.Tensor)) + sum(
        t.numel() * t.element_size() for pair in (getattr(layer, "halves", None),) if pair for t in pair)


def paths(linear: nn.Linear) -> dict[str, tuple[nn.Module, Callable]]:
    """name -> (layer, its product x -> y): each storage and the computation it runs."""
    out = {}
    if cpu.kernels_available():
        q8, q4 = Int8Linear(linear), Int4Linear(linear)
        out["int8-grouped-kernel"] = (q8, q8)
        out["int8-grouped-reference"] = (q8, lambda x, q=q8: F.linear(
            x, quant.dequantize_q8(q.packed, q.scales)[: q.out_features]))
        out["int4-grouped-kernel"] = (q4, q4)
        out["int4-grouped-reference"] = (q4, lambda x, q=q4: F.linear(
            x, quant.dequantize_q4(q.packed, q.scales)[: q.out_features]))
    rows8, torch4 = Int8Linear(linear, w8a8=False, grouped=False), Int4Linear(linear, w4a8=False)
    out["int8-rows-pytorch"] = (rows8, rows8)
    out["int4-pytorch"] = (torch4, torch4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    torch.manual_seed(0)
    for k, n in SHAPES:
        linear = nn.Linear(k, n, bias=False)
        found = paths(linear)
        for name, (layer, _) in found.items():
            emit(f"{name} {k}x{n}", "bytes_per_weight", held_bytes(layer) / (k * n), "bytes")
        with torch.inference_mode():
            for rows in args.rows:
                x = torch.randn(rows, k)
                for name, (_, product) in found.items():
                    ms = 1e3 * best_of(args.repeats, lambda p=product, x=x: p(x))
                    emit(f"{name} {k}x{n} rows={rows}", "ms_per_product", ms, "ms")


if __name__ == "__main__":
    main()
