"""The int8 KV cache (``--kv-cache-dtype int8``, ``model/kv_int8.py``) against the float32 one, on real models: the
cache's bytes a token, perplexity on a held text, greedy text on the README's prompts, and batch-1 decoding speed
from long contexts.

- bytes: the cache of one row at ``--context`` positions (rings included, as the model keeps them) over those
  positions;
- perplexity: ``--ppl-tokens`` tokens of Tiny Shakespeare's last tenth (``../shared/data``), fed 128 at a time
  through the cache (each chunk attends the cache the earlier ones left), both caches;
- greedy: the README's prompts (``generate``'s, and ``chat``'s "Hi" through the chat template) and three more, 64
  new tokens each: how many texts are the float32 cache's;
- speed: new tokens/s of 16 steps from a cache holding ``--lengths`` positions of random keys and values (the best
  of three after a warm-up: the speed does not depend on them), eager (an int8 cache steps eagerly).

Prints JSON lines {"config", "metric", "value", "unit"}; ``*_ratio`` figures are int8 over float32, same run.

    python benchmarks/bench_kv_cache.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
        [--int4] [--lengths 1024 8192] [--ppl-tokens 2048]
"""

from __future__ import annotations

import argparse
import gzip
import math
import time
from pathlib import Path

import torch
from common import decode_rate, emit

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time",
           "Water boils at a temperature of"]
CHAT = "Hi"
SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare"
STEPS, CHUNK = 16, 128


def held_text() -> str:
    """Tiny Shakespeare's last tenth (no model here was tuned on it)."""
    text = gzip.decompress((SHAKESPEARE / "input.txt.gz").read_bytes()).decode("utf-8")
    return text[int(len(text) * 0.9):]


def perplexity(model, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ``ids`` after their first, fed CHUNK at a time through a cache."""
    tokens = torch.tensor([ids])
    _, state = model.start(tokens[:, :1], len(ids))
    nll = 0.0
    for first in range(0, len(ids), CHUNK):
        top = min(len(ids), first + CHUNK)
        logp = model.step(tokens[:, :top], state)[0].float().log_softmax(-1)  # (top - first, V): after each column
        targets = tokens[0, first + 1:top + 1]  # the token after each column (none after the last)
        nll -= logp[:len(targets)].gather(1, targets[:, None]).sum().item()
    return math.exp(nll / (len(ids) - 1))


def cache_bytes(model, positions: int) -> int:
    cache = model.new_cache(1, positions, next(model.parameters()))
    return sum(la.self_kv.k.nbytes + la.self_kv.v.nbytes for la in cache.layers)


def filled_rate(model, length: int) -> float:
    """New tokens/s of STEPS one-token steps from a cache of ``length`` random positions (rolled back each run)."""
    cfg = model.config
    cache = model.new_cache(1, length + STEPS, next(model.parameters()))
    for layer in cache.layers:
        held = min(length, layer.self_kv.capacity)
        kv = torch.randn(1, model.cache_heads, held, cfg.d_head)  # (B, H_kv, T, D)
        layer.self_kv.write(length - held, kv, kv)
    return decode_rate(model, cache, length, STEPS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a checkpoint or a GGUF file")
    parser.add_argument("--int4", action="store_true", help="int4 weights (the cache's comparison as --int4 runs)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--ppl-tokens", type=int, default=2048)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    from aiayn.inference.generator import TextGenerator

    start = time.perf_counter()
    gen = TextGenerator.from_checkpoint(args.checkpoint, int4=args.int4)
    model, name = gen.model, Path(args.checkpoint).stem + ("/int4" if args.int4 else "/fp32")
    emit("machine", "torch_threads", torch.get_num_threads(), "threads")
    ids = gen.tokenizer.encode(held_text())[:args.ppl_tokens]
    prompts = [gen.prompt_ids(p) for p in PROMPTS]
    if gen.chat_template is not None:
        prompts.append(gen.chat_ids([{"role": "user", "content": CHAT}]))
    figures: dict = {}
    with torch.inference_mode():
        for dtype, label in ((None, "float32"), (torch.int8, "int8")):
            model.runtime.kv_cache_dtype = dtype
            config = f"{name}/{label}"
            size = cache_bytes(model, max(args.lengths))
            emit(config, f"kv_bytes_per_token_at_{max(args.lengths)}", round(size / max(args.lengths), 1), "bytes")
            ppl = perplexity(model, ids)
            emit(config, f"perplexity_{len(ids)}_tokens", round(ppl, 4), "ppl")
            texts = [gen.generate(p, args.new_tokens, strategy="greedy")[0] for p in prompts]
            rates = {n: filled_rate(model, n) for n in args.lengths}
            for n, rate in rates.items():
                emit(config, f"decode_from_{n}", round(rate, 2), "tokens/s")
            figures[label] = size, ppl, texts, rates
    f, q = figures["float32"], figures["int8"]
    emit(name, "kv_bytes_ratio", round(q[0] / f[0], 3), "x")
    emit(name, "perplexity_ratio", round(q[1] / f[1], 4), "x")
    emit(name, "greedy_texts_equal", sum(a == b for a, b in zip(f[2], q[2], strict=True)), f"of {len(prompts)}")
    for i, (a, b) in enumerate(zip(f[2], q[2], strict=True)):
        if a != b:
            common = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            emit(f"{name}/prompt{i}", "greedy_same_characters_before_they_differ", common, "characters")
    for n in args.lengths:
        emit(name, f"decode_ratio_from_{n}", round(q[3][n] / f[3][n], 3), "x")
    emit("run", "wall", round(time.perf_counter() - start, 1), "s")


if __name__ == "__main__":
    main()
