"""int8 decoding: PyTorch's ``quantize_dynamic`` (what ``--int8`` uses; deprecated in favour of torchao) against
torchao's ``Int8DynamicActivationInt8WeightConfig`` (the same scheme: int8 weights, activations quantized per
token on the fly) and ``Int8WeightOnlyConfig``, with float32 as the baseline.

A random Llama-shaped decoder-only model (d 512, 6 layers, 8 query / 2 key-value heads, vocabulary 32k), greedy
decoding of 32 new tokens after a 64-token prompt, batch 1 and 16, each variant in the same process one after
the other, median of ``--repeats`` runs. JSON lines {"config", "metric", "value", "unit"}: new tokens/s, the
ratio to float32, and the share of greedy tokens equal to float32's. Needs ``pip install torchao``.

    python benchmarks/bench_int8.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from functools import partial

import torch
from common import emit as print_figure
from torch import nn

from aiayn import DecoderOnly, ModelConfig, generate
from aiayn.inference.precision import quantize

emit = partial(print_figure, digits=4)


def model() -> DecoderOnly:
    torch.manual_seed(0)
    cfg = ModelConfig(arch="decoder-only", vocab_size=32000, d_model=512, n_heads=8, n_kv_heads=2, d_ff=1376,
                      n_encoder_layers=0, n_decoder_layers=6, norm="pre", norm_type="rmsnorm",
                      feed_forward="swiglu", activation="silu", positions="rope", rope_layout="halves",
                      qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False, dropout=0.0,
                      max_len=256)
    return DecoderOnly(cfg).eval()


def torchao_copy(base: DecoderOnly, weight_only: bool) -> DecoderOnly:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    copy_ = copy.deepcopy(base).eval()
    copy_.output = nn.Linear(base.config.d_model, base.config.vocab_size, bias=False)  # untie: int8 of its own
    copy_.output.weight = nn.Parameter(base.output.weight.detach().clone())
    quantize_(copy_, Int8WeightOnlyConfig() if weight_only else Int8DynamicActivationInt8WeightConfig())
    return copy_


def speed(m: DecoderOnly, prompt: torch.Tensor, repeats: int) -> tuple[float, list[list[int]]]:
    with torch.no_grad():
        out = generate(m, prompt, "greedy", max_new_tokens=32)  # warm-up, and the tokens
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            generate(m, prompt, "greedy", max_new_tokens=32)
            times.append(time.perf_counter() - start)
    return prompt.size(0) * 32 / statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    base = model()
    variants = {"fp32": base, "quantize_dynamic": quantize(base), "torchao_int8_dyn": torchao_copy(base, False),
                "torchao_int8_weight_only": torchao_copy(base, True)}
    for batch in (1, 16):
        prompt = torch.randint(4, 32000, (batch, 64), generator=torch.Generator().manual_seed(batch))
        rates, tokens = {}, {}
        for name, m in variants.items():
            rates[name], tokens[name] = speed(m, prompt, args.repeats)
            same = sum(a == b for x, y in zip(tokens[name], tokens["fp32"], strict=True)
                       for a, b in zip(x, y, strict=False)) / sum(len(x) for x in tokens["fp32"])
            emit(f"{name}/batch{batch}", "new_tokens_per_s", rates[name], "tokens/s")
            emit(f"{name}/batch{batch}", "vs_fp32", rates[name] / rates["fp32"], "x")
            emit(f"{name}/batch{batch}", "greedy_tokens_equal_to_fp32", same, "share")
        emit(f"torchao-vs-quantize_dynamic/batch{batch}", "ratio",
             rates["torchao_int8_dyn"] / rates["quantize_dynamic"], "x")


if __name__ == "__main__":
    main()
