"""A recipe's result as the mean and spread of several seeds, each scored as the recipe says: trained
(``aiayn train --seed N``), its last ``--last`` checkpoints averaged (``aiayn average``), then decoded with the
recipe's own decoding (the checkpoint's generation.json) on ``val`` and the test set (``aiayn evaluate``).

Resumable, so the seeds can be run in parts (an hour each for the Multi30k recipes): a seed with a result file is
not run again, a run stopped midway resumes from its ``last/``. While a seed trains, the process's resident memory
is sampled (``bench_rss.sample_rss``). Prints JSON lines {"config", "metric", "value", "unit"}: per seed, the steps
and minutes its run took, the step count auto_steps chose, BLEU on val and test (and tokenized BLEU with
``--tokenized-bleu``), for a ``both_directions`` recipe the same the way back (``back_*``: tgt_lang -> src_lang,
the sources led by ``<2SRC>``), the largest RSS and its growth; then, over the seeds, their mean, sample standard
deviation, min and max; and the machine's CPU.

    python scripts/recipe_seeds.py --recipe configs/multi30k-de-en.yaml --seeds 0 1 2 --output runs/seeds-de-en \\
        --data-dir ../shared/data/multi30k [--last 3] [--test test_2016_flickr] [--tokenized-bleu LANG]
        [--back-decoding length_penalty=1.2] [--back-tokenized-bleu LANG]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' RSS sampling
from bench_rss import emit, growth, sample_rss

from aiayn.data.datasets import cache_dir

AIAYN = [sys.executable, "-m", "aiayn"]


def machine() -> str:
    """The CPU's model name and the cores this process may use."""
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return f"{names[0] if names else 'unknown CPU'}, {len(os.sched_getaffinity(0))} cores"


def train(args, seed: int, run: Path) -> list[tuple[float, float]]:
    """Train (or resume) one seed's run; (minute, RSS MB) samples taken while it trained."""
    command = [*AIAYN, "train", "--config", args.recipe, "--seed", str(seed), "--output", str(run)]
    if (run / "last").is_dir():
        command.append("--resume")
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    samples = sample_rss(proc, args.rss_every)
    if proc.returncode:
        raise SystemExit(f"seed {seed}: aiayn train exited with {proc.returncode} (rerun to resume)")
    return samples


def evaluate(args, checkpoint: Path, split: str, langs: tuple[str, str], options: list[str],
             tokenized: str | None) -> dict:
    """``aiayn evaluate --json`` of ``checkpoint`` on ``split`` from ``langs[0]`` to ``langs[1]`` with the
    checkpoint's own decoding and ``options`` (more flags of aiayn evaluate)."""
    folder = Path(args.data_dir) if args.data_dir else cache_dir() / "multi30k"  # where aiayn train fetched it
    command = [*AIAYN, "evaluate", "--checkpoint", str(checkpoint), "--json",
               "--src", str(folder / f"{split}.{langs[0]}.gz"), "--ref", str(folder / f"{split}.{langs[1]}.gz"),
               *options]
    if tokenized:
        command += ["--tokenized-bleu", tokenized]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def scores(args, checkpoint: Path, recipe: dict) -> dict:
    """BLEU on val and test from src_lang to tgt_lang; with ``both_directions`` also back (``back_`` keys): the
    sources led by the source language's tag, with ``--back-decoding``."""
    src, tgt = recipe["src_lang"], recipe["tgt_lang"]
    ways = [("", (src, tgt), [], args.tokenized_bleu)]
    if recipe.get("both_directions"):
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in (x.split("=", 1) for x in args.back_decoding)]
        ways.append(("back_", (tgt, src), [f"--source-prefix=<2{src}>", *flags], args.back_tokenized_bleu))
    result = {}
    for prefix, langs, options, tokenized in ways:
        valid = evaluate(args, checkpoint, "val", langs, options, tokenized)
        test = evaluate(args, checkpoint, args.test, langs, options, tokenized)
        result |= {f"{prefix}val_bleu": valid["bleu"], f"{prefix}test_bleu": test["bleu"],
                   f"{prefix}test_chrf": test["chrf"], f"{prefix}test_tokenized_bleu": test.get("tokenized_bleu"),
                   f"{prefix}decoding": test["decoding"]}
    return result


def run_seed(args, seed: int, recipe: dict) -> dict:
    """One seed's result, from its result file or by training, averaging and scoring it (then saved)."""
    out = Path(args.output)
    result_file = out / f"seed-{seed}.json"
    if result_file.exists():
        return json.loads(result_file.read_text())
    run, averaged = out / f"seed-{seed}", out / f"seed-{seed}-last{args.last}"
    samples = train(args, seed, run)
    subprocess.run([*AIAYN, "average", "--run", str(run), "--last", str(args.last), "--output", str(averaged)],
                   check=True, stdout=subprocess.DEVNULL)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    chosen = [x["max_steps"] for x in logged if "max_steps" in x]
    result = {"seed": seed, "machine": machine(), "steps": max(x.get("step", 0) for x in logged),
              "train_minutes": max(x.get("time_min", 0) for x in logged), "auto_steps": chosen[-1] if chosen else 0,
              **scores(args, averaged, recipe), "rss_max_mb": max((mb for _, mb in samples), default=0.0),
              "rss_growth": growth(samples, settle=3.0)}
    tmp = result_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(result_file)
    return result


SCORES = {"val_bleu": "BLEU", "test_bleu": "BLEU", "test_chrf": "chrF", "test_tokenized_bleu": "BLEU"}
UNITS = {"steps": "steps", "train_minutes": "min", "auto_steps": "steps", **SCORES,
         **{f"back_{key}": unit for key, unit in SCORES.items()}, "rss_max_mb": "MB", "rss_growth": "ratio"}


def report(name: str, results: list[dict]) -> None:
    """Per seed, then mean / sample standard deviation / min / max over the seeds."""
    for r in results:
        for key, unit in UNITS.items():
            if r.get(key) is not None:  # not measured: tokenized BLEU without --tokenized-bleu, growth under 3 min,
                # the way back of a one-direction recipe
                emit(f"{name}/seed{r['seed']}", key, r[key], unit)
    for key in ("val_bleu", "test_bleu", "test_tokenized_bleu", "back_val_bleu", "back_test_bleu",
                "back_test_tokenized_bleu", "steps"):
        values = [r[key] for r in results if r.get(key) is not None]
        if not values:
            continue
        emit(f"{name}/{len(values)} seeds", f"{key}_mean", statistics.mean(values), UNITS[key])
        if len(values) > 1:
            emit(f"{name}/{len(values)} seeds", f"{key}_std", statistics.stdev(values), UNITS[key])
        emit(f"{name}/{len(values)} seeds", f"{key}_min", min(values), UNITS[key])
        emit(f"{name}/{len(values)} seeds", f"{key}_max", max(values), UNITS[key])
    print(json.dumps({"config": name, "metric": "machine", "value": machine(), "unit": ""}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="configs/multi30k-de-en.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", required=True, help="folder of the runs (seed-N/) and results (seed-N.json)")
    parser.add_argument("--data-dir", dest="data_dir", default=None, help="folder of the corpus' val/test files")
    parser.add_argument("--last", type=int, default=3, help="checkpoints averaged, as the recipe says")
    parser.add_argument("--test", default="test_2016_flickr", help="the test split's file prefix")
    parser.add_argument("--tokenized-bleu", dest="tokenized_bleu", default=None, metavar="LANG")
    parser.add_argument("--back-decoding", dest="back_decoding", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="both_directions recipes: decoding options of the way back, e.g. length_penalty=1.2")
    parser.add_argument("--back-tokenized-bleu", dest="back_tokenized_bleu", default=None, metavar="LANG")
    parser.add_argument("--rss-every", dest="rss_every", type=float, default=30.0, help="seconds between samples")
    args = parser.parse_args()
    recipe = yaml.safe_load(Path(args.recipe).read_text())
    Path(args.output).mkdir(parents=True, exist_ok=True)
    report(Path(args.recipe).stem, [run_seed(args, seed, recipe) for seed in args.seeds])


if __name__ == "__main__":
    main()
