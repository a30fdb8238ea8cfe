"""Tensor-parallel inference: memory per process and tokens/s, the whole model in one process against the model
split over N processes (``--tensor-parallel``, torchrun, gloo on the CPU or NCCL on GPUs).

For each N (1: the plain model in one process, every thread of the machine; N > 1: torchrun with N processes, the
threads divided among them), greedy continuations of random prompts at each batch size; each process reports the
bytes of the parameters it holds, the bytes of its KV cache for the batch, its peak RSS, and the new tokens a
second (all rows together). Prints JSON lines {"config", "metric", "value", "unit"}; compare within one run.

    python benchmarks/bench_tensor_parallel.py --checkpoint CHECKPOINT|smollm2-shaped [--procs 1 2] [--batch 1 16]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from functools import partial

from common import emit as print_figure

# SmolLM2-135M has 9 heads and 3 key/value heads, which split over no even number of processes: the same widths,
# depth and vocabulary with 8 heads of 72 and 4 key/value heads (``--checkpoint smollm2-shaped``)
SMOLLM2_SHAPED = dict(arch="decoder-only", vocab_size=49152, d_model=576, n_heads=8, n_kv_heads=4, head_dim=72,
                      d_ff=1536, n_decoder_layers=30, n_encoder_layers=0, norm="pre", norm_type="rmsnorm",
                      feed_forward="swiglu", activation="silu", positions="rope", rope_layout="halves",
                      qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False, dropout=0.0,
                      max_len=2048, layer_norm_eps=1e-5, position_base=100000.0)


def _rss_peak_mb() -> float:
    for line in open("/proc/self/status"):  # noqa: SIM115
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(args: argparse.Namespace) -> None:
    """One process: load, split when under torchrun, decode every batch size, print its lines."""
    import torch

    from aiayn import generate
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.tensor_parallel import local_bytes, start

    parallel = start(args.device) if "WORLD_SIZE" in os.environ else None
    prepare = None if parallel is None else parallel.prepare
    if args.checkpoint == "smollm2-shaped":  # SmolLM2-135M's shape with 8 query and 4 key/value heads, random
        from aiayn import build_model
        from aiayn.model.config import ModelConfig

        torch.manual_seed(0)  # the same weights in every process
        model = build_model(ModelConfig(**SMOLLM2_SHAPED)).eval()
        model = model if prepare is None else prepare(model)
    else:
        model, _ = load_checkpoint(args.checkpoint, prepare=prepare)
    model.eval().to(args.device if parallel is None else parallel.device)
    procs, rank = (1, 0) if parallel is None else (parallel.world, parallel.rank)
    config = {"checkpoint": os.path.basename(os.path.normpath(args.checkpoint)), "procs": procs, "rank": rank,
              "threads": torch.get_num_threads(), "device": args.device}
    emit(config, "weights_per_process", local_bytes(model) / 2**20, "MiB")
    torch.manual_seed(0)
    for batch in args.batch:
        prompts = torch.randint(5, model.config.vocab_size - 1, (batch, args.prompt_tokens))
        cache = model.new_cache(batch, args.prompt_tokens + args.new_tokens, prompts.float())
        kv = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.self_kv.k, layer.self_kv.v))
        with torch.no_grad():
            generate(model, prompts[:, :8], "greedy", max_new_tokens=4)  # warm up
            begin = time.perf_counter()
            out = generate(model, prompts, "greedy", max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
            seconds = time.perf_counter() - begin
        emit({**config, "batch": batch}, "kv_cache_per_process", kv / 2**20, "MiB")
        emit({**config, "batch": batch}, "new_tokens_per_s", sum(len(row) for row in out) / seconds, "tokens/s")
    emit(config, "rss_peak", _rss_peak_mb(), "MiB")


emit = partial(print_figure, stream=sys.__stdout__)  # every rank (tensor_parallel.start silences the others)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a checkpoint whose heads divide over the processes, or "
                        "smollm2-shaped (random weights of SmolLM2-135M's shape with 8 and 4 heads)")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--prompt-tokens", type=int, default=32, dest="prompt_tokens")
    parser.add_argument("--new-tokens", type=int, default=64, dest="new_tokens")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    own = [a for a in sys.argv[1:] if a != "--worker"]
    for procs in args.procs:
        if procs == 1:
            command = [sys.executable, __file__, *own, "--worker"]
            env = dict(os.environ)
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
                       __file__, *own, "--worker"]
            env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or procs) // procs))}
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"bench_tensor_parallel: {procs} process(es) failed:\n{result.stderr[-3000:]}")
        sys.stdout.write("".join(line + "\n" for line in result.stdout.splitlines() if line.startswith("{")))


if __name__ == "__main__":
    main()
