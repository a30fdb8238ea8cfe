"""Adapting a trained model to new data: full fine-tuning against LoRA against training from scratch.

``--task lm``: a Llama-shaped character model (``configs/shakespeare-llama.yaml``) trained on the first half of
Tiny Shakespeare, then adapted to the second half (its own 90/10 split) for ``--adapt-steps`` steps: full
fine-tuning (``--init-from``), LoRA r 8 on q, k, v, o and the feed-forward layers (``--lora-r 8``), and the same
recipe from scratch. ``--task translation``: a small de->en Transformer trained on the first half of
Multi30k's training pairs, adapted on ``--pairs`` pairs of the second half; BLEU on Multi30k's val (greedy).

Every training runs in its own process (so its peak RSS is its own), one after the other, and reports: the
validation loss (lm) or BLEU (translation), trainable parameters, optimizer-state bytes (Adam's two moments
per trainable parameter, float32), peak RSS, training tokens/s and training minutes. JSON lines
{"config", "metric", "value", "unit"}.

    python benchmarks/bench_finetune.py --task lm [--base-steps 1000] [--adapt-steps 300]
    python benchmarks/bench_finetune.py --task translation [--base-minutes 6] [--adapt-steps 300] [--pairs 3000]
    python benchmarks/bench_finetune.py ... --device cuda --precision bf16   # on a GPU (peak_gpu_mb too)

``--data-dir`` points at a copy of the corpora (default ``../shared/data`` beside the checkout).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from common import emit as print_figure

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"


def read_gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read()


emit = partial(print_figure, digits=4)


def worker(recipe: dict) -> None:
    """Train one recipe; print one JSON line of what it measured."""
    import torch

    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    trainer = Trainer(TrainConfig(**recipe))
    result = trainer.train()
    state = list(trainer.optimizer.state.values())
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    records = [json.loads(line) for line in (Path(recipe["output"]) / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    print(json.dumps({
        "trainable": sum(p.numel() for p in trainable),
        "optimizer_bytes": sum(t.numel() * t.element_size() for s in state for t in s.values()
                               if isinstance(t, torch.Tensor) and t.dim() > 0),
        "weights_grads_optimizer_bytes": sum(p.numel() * p.element_size() for p in trainer.model.parameters())
        + sum(p.numel() * p.element_size() for p in trainable)
        + sum(t.numel() * t.element_size() for s in state for t in s.values()
              if isinstance(t, torch.Tensor) and t.dim() > 0),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tokens_per_s": sum(rates) / max(len(rates), 1), "minutes": trainer.train_seconds / 60,
        "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "valid_loss": result.get("valid_loss"), "bleu": result.get("valid_bleu")}))


def run(name: str, recipe: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(recipe)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name}: {done.stderr.strip().splitlines()[-1]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    loss_unit = "nats/char" if name.startswith("lm/") else "nats/token"
    for metric, unit in (("valid_loss", loss_unit), ("bleu", "BLEU"), ("trainable", "parameters"),
                         ("optimizer_bytes", "bytes"), ("weights_grads_optimizer_bytes", "bytes"),
                         ("peak_rss_mb", "MiB"), ("peak_gpu_mb", "MiB"), ("tokens_per_s", "tokens/s"),
                         ("minutes", "min")):
        if out.get(metric) is not None:
            emit(name, metric, out[metric], unit)
    return out


def lm(args: argparse.Namespace, tmp: Path) -> None:
    text = read_gz(args.data_dir / "tinyshakespeare" / "input.txt.gz")
    half = len(text) // 2
    (tmp / "a.txt").write_text(text[:half])
    (tmp / "b.txt").write_text(text[half:])
    common = {"task": "lm", "device": args.device, "log_every": 50, "keep_last": 0, "precision": args.precision}
    from aiayn.training.config import read_recipe

    recipe = {**read_recipe(ROOT / "configs" / "shakespeare-llama.yaml"), **common}
    run("lm/base-on-half-a", {**recipe, "data": str(tmp / "a.txt"), "output": str(tmp / "base"),
                              "max_steps": args.base_steps, "eval_every": args.base_steps})
    adapt = {**common, "data": str(tmp / "b.txt"), "max_steps": args.adapt_steps, "eval_every": args.adapt_steps,
             "block_size": 64, "max_tokens": 768, "schedule": "cosine", "warmup": 20, "label_smoothing": 0.0,
             "clip_norm": 1.0}
    run("lm/full-fine-tune", {**adapt, "init_from": str(tmp / "base"), "lr": 5e-4, "output": str(tmp / "full")})
    run("lm/lora-r8", {**adapt, "init_from": str(tmp / "base"), "lr": 3e-3, "lora_r": 8, "lora_alpha": 16.0,
                       "lora_targets": "q,k,v,o", "output": str(tmp / "lora")})
    scratch = {k: v for k, v in recipe.items() if k not in ("max_steps", "eval_every", "data")}
    run("lm/from-scratch", {**scratch, **adapt, "lr": 1e-3, "output": str(tmp / "scratch")})


def translation(args: argparse.Namespace, tmp: Path) -> None:
    pairs = {lang: read_gz(args.data_dir / "multi30k" / f"train.{lang}.gz").splitlines() for lang in ("de", "en")}
    half = len(pairs["de"]) // 2
    for lang in ("de", "en"):
        (tmp / f"a.{lang}").write_text("\n".join(pairs[lang][:half]) + "\n")
        (tmp / f"b.{lang}").write_text("\n".join(pairs[lang][half: half + args.pairs]) + "\n")
        (tmp / f"val.{lang}").write_text(read_gz(args.data_dir / "multi30k" / f"val.{lang}.gz"))
    from aiayn.training.config import read_recipe

    recipe = read_recipe(ROOT / "configs" / "multi30k-de-en.yaml")
    recipe = {k: v for k, v in recipe.items() if k not in ("data", "decoding", "keep_last")}
    common = {"src_lang": "de", "tgt_lang": "en", "valid": str(tmp / "val"), "device": args.device,
              "precision": args.precision, "keep_last": 0, "bleu_sentences": 1014, "log_every": 50}
    run("translation/base-on-half-a", {**recipe, **common, "data": str(tmp / "a"), "output": str(tmp / "base"),
                                       "time_limit_min": args.base_minutes, "max_steps": 100_000,
                                       "eval_every": 100_000, "schedule": "inverse_sqrt"})
    adapt = {**common, "data": str(tmp / "b"), "max_steps": args.adapt_steps, "eval_every": args.adapt_steps,
             "max_tokens": 3072, "schedule": "cosine", "warmup": 30, "label_smoothing": 0.1, "clip_norm": 1.0}
    run("translation/full-fine-tune", {**adapt, "init_from": str(tmp / "base"), "lr": 5e-4,
                                       "output": str(tmp / "full")})
    run("translation/lora-r8", {**adapt, "init_from": str(tmp / "base"), "lr": 3e-3, "lora_r": 8,
                                "lora_alpha": 16.0, "lora_targets": "q,k,v,o,ffn", "output": str(tmp / "lora")})
    scratch = {k: v for k, v in recipe.items() if k not in ("max_steps", "eval_every", "time_limit_min")}
    run("translation/from-scratch", {**scratch, **adapt, "lr": 2e-3, "vocab_size": 3000,
                                     "output": str(tmp / "scratch")})


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["lm", "translation"], default="lm")
    parser.add_argument("--base-steps", type=int, default=1000)
    parser.add_argument("--base-minutes", type=float, default=6.0)
    parser.add_argument("--adapt-steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--data-dir", type=Path, default=SHARED)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (lm if args.task == "lm" else translation)(args, Path(tmp))


if __name__ == "__main__":
    main()
