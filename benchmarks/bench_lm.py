"""The character-level language model on Tiny Shakespeare with nanoGPT's CPU dimensions.

Trains ``configs/shakespeare-char.yaml`` (4 layers, 4 heads, d_model 128, context 64, batch 12, 2,000
iterations, dropout 0) with validation every 100 steps, and prints JSON lines: training tokens/s, the final
validation loss (nats per character, every character of the last 10% predicted once) and the training
time at which validation loss first reached 1.88 (nanoGPT's figure for this recipe).

    python benchmarks/bench_lm.py [--data-dir ../shared/data/tinyshakespeare] [--output runs/bench-lm]
                                  [--max-steps 2000] [--target 1.88]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def emit(config: str, metric: str, value: float, unit: str) -> None:
    print(json.dumps({"config": config, "metric": metric, "value": round(value, 4), "unit": unit}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "tinyshakespeare"))
    parser.add_argument("--output", default=str(ROOT / "runs" / "bench-lm"))
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--target", type=float, default=1.88)
    args = parser.parse_args()

    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    shutil.rmtree(args.output, ignore_errors=True)
    cfg = TrainConfig.from_yaml(ROOT / "configs" / "shakespeare-char.yaml", output=args.output, data_dir=args.data_dir,
                                max_steps=args.max_steps, eval_every=100, log_every=100)
    started = time.perf_counter()
    Trainer(cfg).train()
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (Path(args.output) / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "tokens_per_s" in r]
    valid = [r for r in records if "valid_loss" in r]
    name = f"shakespeare-char/{args.max_steps}"
    emit(name, "train_tokens_per_s", sum(r["tokens_per_s"] for r in train) / len(train), "tokens/s")
    emit(name, "final_valid_loss", valid[-1]["valid_loss"], "nats/char")
    emit(name, "best_valid_loss", min(r["valid_loss"] for r in valid), "nats/char")
    reached = [r for r in valid if r["valid_loss"] <= args.target]
    if reached:
        emit(name, f"train_minutes_to_{args.target}", reached[0]["time_min"], "min")
        emit(name, f"steps_to_{args.target}", reached[0]["step"], "steps")
    emit(name, "wall_minutes_with_validation", wall / 60, "min")


if __name__ == "__main__":
    main()
