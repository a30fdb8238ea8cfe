"""What a sliding layer's ring cache buys: Gemma 3 270M (15 sliding layers of window 512, 3 full ones) at long
contexts, its KV cache as rings (``model/cache.py``: each sliding layer keeps its window and 16 more) against the
mask-only window (every layer keeps every position; the mask hides what is out of the window): the cache's bytes,
and batch-1 decode tokens/s from that context (16 steps, the best of three after a warm-up; the cache filled with
random keys, for the speed does not depend on them).

The model is the real one read from its GGUF file (``make gemma3``), or without it a random one of its shape.
Prints JSON lines {"config", "metric", "value", "unit"}; ``*_ratio`` figures are from the same run.

    python benchmarks/bench_sliding_cache.py [--gguf ~/.cache/aiayn/gemma-3-270m-q4_k_m.gguf] [--lengths 1024 8192]
        [--plot docs/img/sliding-cache.png]

``--plot``: the cache's size from 512 to 16,384 positions, rings against the mask-only window (docs/tour.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import decode_rate, emit

GGUF = Path.home() / ".cache" / "aiayn" / "gemma-3-270m-q4_k_m.gguf"
SHAPE = dict(model_type="gemma3_text", vocab_size=262144, hidden_size=640, intermediate_size=2048,
             num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512,
             rope_theta=1e6, rope_local_base_freq=1e4, query_pre_attn_scalar=256, max_position_embeddings=32768)
STEPS = 16


def gemma(gguf: Path):
    """The real Gemma 3 270M, or a random model of its shape."""
    from aiayn.formats.gemma import gemma_config
    from aiayn.formats.gguf import read_gguf
    from aiayn.model.decoder_only import DecoderOnly

    if gguf.exists():
        return read_gguf(gguf)[0], "gemma3-270m"
    torch.manual_seed(0)
    return DecoderOnly(gemma_config(SHAPE, None)).eval(), "gemma3-270m-shape"


def allocated(model, positions: int, rings: bool):
    """A batch-1 cache with room for ``positions``: the model's own (rings), or every layer keeping every position
    (the mask-only window)."""
    from aiayn.model.cache import DecoderCache

    cfg = model.config
    if rings:
        return model.new_cache(1, positions, next(model.parameters()))
    return DecoderCache.allocate(cfg.n_decoder_layers, 1, cfg.kv_heads, positions, cfg.d_head)


def filled(model, length: int, rings: bool):
    """A batch-1 cache holding ``length`` positions of random keys/values: rings, or every layer whole."""
    cfg, cache = model.config, allocated(model, length + STEPS, rings)
    for layer in cache.layers:
        kv = torch.randn(1, cfg.kv_heads, length, cfg.d_head)  # (B, H_kv, T, D)
        layer.self_kv.write(0, kv, kv)
    return cache


def plot(model, name: str, output: Path) -> None:
    """The batch-1 cache's MiB by context length, rings and mask-only (allocated, not filled)."""
    from aiayn.visual.figures import pyplot, save_figure

    cfg, lengths = model.config, [512 * 2 ** i for i in range(6)]
    rings = [mib(allocated(model, n, True)) for n in lengths]
    whole = [mib(allocated(model, n, False)) for n in lengths]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    ax.plot(lengths, whole, "o-", label="mask-only window: every layer keeps every position")
    ax.plot(lengths, rings, "o-", label=f"rings: the {cfg.layer_types.count('sliding')} sliding layers keep "
                                        f"{cfg.sliding_window} + 16")
    ax.set(xscale="log", xlabel="context (tokens)", ylabel="KV cache, batch 1 (MiB, float32)",
           title=f"{name}: {cfg.layer_types.count('full')} full and {cfg.layer_types.count('sliding')} sliding layers")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.legend(fontsize=8)
    print(save_figure(fig, output))


def mib(cache) -> float:
    """A cache's keys and values, MiB."""
    return sum(la.self_kv.k.nbytes + la.self_kv.v.nbytes for la in cache.layers) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=GGUF)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--plot", type=Path, help="draw the cache's size by context length to this PNG, and stop")
    args = parser.parse_args()
    start = time.perf_counter()
    model, name = gemma(args.gguf)
    if args.plot:
        plot(model, name, args.plot)
        return
    emit("machine", "torch_threads", torch.get_num_threads(), "threads")
    with torch.inference_mode():
        for length in args.lengths:
            figures = {}
            for rings in (True, False):
                cache = filled(model, length, rings)
                config = f"{name}/context{length}/{'ring' if rings else 'mask_only'}"
                size = mib(cache)
                figures[rings] = size, decode_rate(model, cache, length, STEPS)
                emit(config, "kv_cache", round(size, 1), "MiB")
                emit(config, "decode", round(figures[rings][1], 2), "tokens/s")
            emit(f"{name}/context{length}", "kv_cache_ratio_ring_to_mask_only",
                 round(figures[True][0] / figures[False][0], 3), "x")
            emit(f"{name}/context{length}", "decode_ratio_ring_to_mask_only",
                 round(figures[True][1] / figures[False][1], 3), "x")
    emit("run", "wall", round(time.perf_counter() - start, 1), "s")


if __name__ == "__main__":
    main()
