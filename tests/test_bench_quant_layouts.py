"""benchmarks/bench_quant_layouts.py compares like with like: every storage's product is the layer's own (the
reference dequantization multiplies the same weights as the kernel), and each layer holds one storage (its bytes
per weight: no second copy beside it)."""

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

from aiayn.model import cpu

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_quant_layouts.py"
sys.path.insert(0, str(BENCH.parent))  # the benchmarks import their shared module (benchmarks/common.py)


def test_each_path_multiplies_the_layers_weights_and_holds_one_storage():
    spec = importlib.util.spec_from_file_location("bench_quant_layouts", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    torch.manual_seed(0)
    linear = nn.Linear(128, 96, bias=False)
    found = bench.paths(linear)
    grouped = {"int8-grouped-kernel", "int8-grouped-reference", "int4-grouped-kernel", "int4-grouped-reference"}
    assert set(found) == {"int8-rows-pytorch", "int4-pytorch"} | (grouped if cpu.kernels_available() else set())
    x = torch.randn(3, 128)
    with torch.inference_mode():
        for name, (layer, product) in found.items():
            y = product(x).float()
            expected = x @ layer.dequantized().float().t()  # (3, 96): the weights the layer holds
            assert (y - expected).abs().max() <= 0.05 * expected.abs().max(), name  # (int8 activations round)
            exact = x @ linear.weight.t()
            assert (y - exact).abs().max() <= 0.25 * exact.abs().max(), name  # and they are the linear's
            per_weight = bench.held_bytes(layer) / linear.weight.numel()
            assert per_weight <= (0.65 if name.startswith("int4") else 1.07), (name, per_weight)
