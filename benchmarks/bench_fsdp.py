"""Memory per rank: DDP (a whole copy of weights, gradients and Adam's moments on every rank) against
``--fsdp`` (FSDP2 ``fully_shard``: each rank keeps its shard), two processes over gloo on the CPU.

Each mode trains the same recipe (the reverse task, preset ``base`` by default: 44 M parameters) for
``--steps`` steps under ``torchrun --nproc-per-node 2``, then validates and writes its checkpoint. Every rank
reports: the bytes of its training state (its parameters, their gradients and Adam's two moments, local
shards under FSDP), its peak RSS while training (before the checkpoint) and its peak RSS at the end (rank 0
gathers the full weights and optimizer state to write the ordinary checkpoint). JSON lines
{"config", "metric", "value", "unit"}; compare the two modes as ratios within one run.

    python benchmarks/bench_fsdp.py [--preset base] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from common import emit as print_figure


def local_bytes(tensor) -> int:
    """Bytes this rank holds of ``tensor`` (a DTensor's local shard under FSDP)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> None:
    """One rank under torchrun: train, measure, write OUTPUT.rankN.json."""
    import torch

    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    recipe = {"data": "reverse", "preset": args.preset, "vocab_size": 300, "synthetic_size": 2000,
              "max_tokens": 512, "max_steps": args.steps, "eval_every": args.steps, "bleu_sentences": 0,
              "keep_last": 0, "log_every": 1, "device": "cpu", "precision": "fp32", "warmup": 2,
              "output": args.output, "fsdp": args.mode == "fsdp"}
    trainer = Trainer(TrainConfig(**recipe))
    seen = {}
    original = trainer.evaluate_and_save

    def measured():
        params = [p for p in trainer.model.parameters()]
        seen["state_bytes"] = (sum(local_bytes(p) for p in params)
                               + sum(local_bytes(p) for p in params if p.requires_grad)  # their gradients
                               + sum(local_bytes(t) for s in trainer.optimizer.state.values()
                                     for t in s.values() if isinstance(t, torch.Tensor) and t.dim() > 0))
        seen["peak_rss_training_mib"] = peak_rss_mib()
        return original()

    trainer.evaluate_and_save = measured
    trainer.train()
    rank = int(os.environ["RANK"])
    Path(f"{args.output}.rank{rank}.json").write_text(json.dumps({"rank": rank, **seen,
                                                                  "peak_rss_end_mib": peak_rss_mib()}))


emit = partial(print_figure, digits=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--worker", choices=["ddp", "fsdp"], dest="mode")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.mode:
        worker(args)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("ddp", "fsdp"):
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                       __file__, "--worker", mode, "--preset", args.preset, "--steps", str(args.steps),
                       "--output", str(Path(tmp) / mode)]
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode:
                raise SystemExit(f"{mode}: {done.stderr.strip().splitlines()[-1]}")
            lines = [json.loads((Path(tmp) / f"{mode}.rank{rank}.json").read_text()) for rank in (0, 1)]
            for line in sorted(lines, key=lambda r: r["rank"]):
                name = f"{args.preset}/{mode}/rank{line['rank']}"
                emit(name, "training_state", line["state_bytes"] / 2**20, "MiB")
                emit(name, "peak_rss_training", line["peak_rss_training_mib"], "MiB")
                emit(name, "peak_rss_with_checkpoint", line["peak_rss_end_mib"], "MiB")
                results[(mode, line["rank"])] = line
    for rank in (0, 1):
        for metric in ("state_bytes", "peak_rss_training_mib", "peak_rss_end_mib"):
            emit(f"{args.preset}/fsdp-vs-ddp/rank{rank}", f"{metric}_ratio",
                 results[("fsdp", rank)][metric] / results[("ddp", rank)][metric], "x")


if __name__ == "__main__":
    main()
