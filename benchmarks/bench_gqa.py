"""What grouped-query attention buys at decoding time: a decoder-only model with 8 query heads, multi-head (8
key/value heads) against grouped-query (2 key/value heads) at equal parameters (the GQA model's SwiGLU is wider by
what its K/V projections save): KV-cache bytes per token, and greedy decoding tokens/s at batch 1 and 16 after a
512-token prompt, both with the prompt's prefill (``end_to_end``) and for the new tokens alone (``decode``: the
time of N new tokens minus the time of 1, over N - 1). An imported model's speed against other engines is
``bench_engines.py --preset llama``.

Prints JSON lines {"config", "metric", "value", "unit"}; ``decode_speedup`` is a ratio from the same run.

    python benchmarks/bench_gqa.py [--new-tokens 32]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from common import best_of as best_of_runs
from common import emit as print_figure

PROMPT_KV = 512

emit = partial(print_figure, digits=4)


def best_of(fn, repeats: int = 2) -> float:
    """The fastest of ``repeats`` calls after a warm-up call."""
    fn()
    return best_of_runs(repeats, fn)


def kv_part(new_tokens: int) -> None:
    from aiayn import DecoderOnly, ModelConfig, count_parameters, generate, pack

    llama = dict(norm="pre", norm_type="rmsnorm", feed_forward="swiglu", activation="silu", positions="rope",
                 rope_layout="halves", qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False,
                 dropout=0.0, arch="decoder-only", vocab_size=8000, d_model=512, n_heads=8, n_encoder_layers=0,
                 n_decoder_layers=4)
    mha = ModelConfig(**llama, d_ff=1365)
    gqa = ModelConfig(**llama, d_ff=1365 + 2 * 512 * 384 // (3 * 512), n_kv_heads=2)  # K/V savings into SwiGLU
    results = {}
    for name, cfg in (("mha-8kv", mha), ("gqa-2kv", gqa)):
        torch.manual_seed(0)
        model = pack(DecoderOnly(cfg).eval())
        emit(name, "parameters", count_parameters(cfg), "parameters")
        per_token = 2 * cfg.n_decoder_layers * cfg.kv_heads * cfg.d_head * 4  # K and V, float32
        emit(name, "kv_cache_bytes_per_token", per_token, "bytes")
        for batch in (1, 16):
            prompt = torch.randint(5, cfg.vocab_size, (batch, PROMPT_KV))

            def run(n: int, model=model, prompt=prompt):
                return generate(model, prompt, "greedy", max_new_tokens=n, min_new_tokens=n)

            with torch.inference_mode():
                full, one = best_of(lambda run=run: run(new_tokens)), best_of(lambda run=run: run(1))
            config = f"{name}/batch{batch}/prompt{PROMPT_KV}"
            results[(name, batch)] = batch * (new_tokens - 1) / (full - one)
            emit(config, "end_to_end_tokens_per_s", batch * new_tokens / full, "tokens/s")
            emit(config, "decode_tokens_per_s", results[(name, batch)], "tokens/s")
            emit(config, "kv_cache_mb", per_token * batch * (PROMPT_KV + new_tokens) / 2**20, "MiB")
    for batch in (1, 16):
        emit(f"gqa-vs-mha/batch{batch}", "decode_speedup", results[("gqa-2kv", batch)] / results[("mha-8kv", batch)],
             "x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    emit("machine", "torch_threads", torch.get_num_threads(), "threads")
    kv_part(args.new_tokens)


if __name__ == "__main__":
    main()
