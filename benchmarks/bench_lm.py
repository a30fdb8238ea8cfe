"""The character-level language model on Tiny Shakespeare with nanoGPT's CPU dimensions.

Trains ``configs/shakespeare-char.yaml`` (4 layers, 4 heads, d_model 128, context 64, batch 12, 2,000
iterations, dropout 0) with validation every 100 steps, and prints JSON lines: the parameter count,
training tokens/s, the final validation loss (nats per character, every character of the last 10% predicted
once) and the training time at which validation loss first reached 1.88 (nanoGPT's figure for this recipe).
``--configs`` trains several recipes one after the other (the GPT-shaped and the Llama-shaped twin, equal
in parameters); ``--time-limit-min`` gives each the same training time.

    python benchmarks/bench_lm.py [--configs shakespeare-char shakespeare-llama] [--time-limit-min 3]
        [--data-dir ../shared/data/tinyshakespeare] [--output runs/bench-lm] [--max-steps 2000] [--target 1.88]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from functools import partial
from pathlib import Path

from common import emit as print_figure

ROOT = Path(__file__).resolve().parent.parent


emit = partial(print_figure, digits=4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "tinyshakespeare"))
    parser.add_argument("--output", default=str(ROOT / "runs" / "bench-lm"))
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--target", type=float, default=1.88)
    parser.add_argument("--configs", nargs="+", default=["shakespeare-char"], help="recipes under configs/")
    parser.add_argument("--time-limit-min", type=float, default=0.0, help="training minutes per recipe (0: none)")
    args = parser.parse_args()
    for recipe in args.configs:
        run_recipe(recipe, args)


def run_recipe(recipe: str, args: argparse.Namespace) -> None:
    from aiayn.model.params import count_parameters
    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    output = f"{args.output}/{recipe}"
    shutil.rmtree(output, ignore_errors=True)
    cfg = TrainConfig.from_yaml(ROOT / "configs" / f"{recipe}.yaml", output=output, data_dir=args.data_dir,
                                max_steps=args.max_steps, eval_every=100, log_every=100,
                                time_limit_min=args.time_limit_min)
    started = time.perf_counter()
    trainer = Trainer(cfg)
    trainer.train()
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (Path(output) / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "tokens_per_s" in r]
    valid = [r for r in records if "valid_loss" in r]
    name = f"{recipe}/{args.max_steps}" + (f"/{args.time_limit_min}min" if args.time_limit_min else "")
    emit(name, "parameters", count_parameters(trainer.model.config), "parameters")
    emit(name, "steps", max(r["step"] for r in records if "step" in r), "steps")
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
