"""Corpora larger than memory: preprocessing speed, and training start-up that does not grow with the corpus.

For each size (default 1M, 4M and 8M sentence pairs) a synthetic corpus is generated on the fly (random
words from a 3,000-word vocabulary, 4-20 words a sentence; the target is the source reversed, as TSV), then
``aiayn preprocess`` tokenizes it into shards (one SentencePiece model for all sizes, trained on 100,000
pairs of the first corpus), then the ``tiny`` model trains 100 steps on the shards in a fresh process that
reports its peak resident memory after start-up and after the 100 steps, and the time from the process
start to the end of its first step. Prints JSON lines: {"config", "metric", "value", "unit"}; compare the
8M figures with the 1M ones (same run): memory within 10%, time to the first step flat.

    python benchmarks/bench_data.py [--sizes 1000000 4000000 8000000] [--workdir /tmp/bench-data] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import emit


def generate(path: Path, pairs: int, seed: int = 0) -> None:
    """``pairs`` lines of ``words<TAB>words reversed`` (random words, 4-20 a sentence)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(pairs):
            words = rng.choices(vocab, k=rng.randint(4, 20))
            f.write(" ".join(words) + "\t" + " ".join(reversed(words)) + "\n")


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(data: str, output: str, steps: int, started: float) -> None:
    """Train ``steps`` steps on the shards ``data``; print start-up and step figures as one JSON object."""
    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    cfg = TrainConfig.from_dict({"data": data, "preset": "tiny", "max_steps": steps, "eval_every": steps,
                                 "bleu_sentences": 0, "keep_last": 0, "max_tokens": 2048, "max_len": 64,
                                 "log_every": 1, "warmup": 50, "output": output, "device": "cpu"})
    trainer = Trainer(cfg)
    startup_s, startup_mb = time.time() - started, peak_rss_mb()
    trainer.train()
    first = json.loads((Path(output) / "metrics.jsonl").read_text().splitlines()[1])  # the step-1 line
    print(json.dumps({"startup_s": startup_s, "startup_mb": startup_mb, "peak_mb": peak_rss_mb(),
                      "first_step_s": startup_s + first["time_min"] * 60}))


def run_size(pairs: int, work: Path, tokenizer: Path, steps: int) -> None:
    config = f"{pairs // 1_000_000}M pairs"
    corpus, data = work / f"corpus-{pairs}.tsv", work / f"shards-{pairs}"
    started = time.perf_counter()
    generate(corpus, pairs)
    emit(config, "generate_s", time.perf_counter() - started, "s")
    shutil.rmtree(data, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aiayn", "preprocess", "--data", str(corpus), "--tokenizer",
                    str(tokenizer), "--output", str(data)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    emit(config, "preprocess_pairs_per_s", pairs / seconds, "pairs/s")
    emit(config, "preprocess_s", seconds, "s")
    corpus.unlink()
    shutil.rmtree(work / "run", ignore_errors=True)
    out = subprocess.run([sys.executable, __file__, "--child", str(data), str(work / "run"), str(steps),
                          str(time.time())], check=True, capture_output=True, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    emit(config, "startup_peak_rss", figures["startup_mb"], "MB")
    emit(config, f"peak_rss_after_{steps}_steps", figures["peak_mb"], "MB")
    emit(config, "time_to_first_step", figures["first_step_s"], "s")
    shutil.rmtree(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000, 8_000_000])
    parser.add_argument("--workdir", default="/tmp/bench-data")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        data, output, steps, started = args.child
        child(data, output, int(steps), float(started))
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sample = work / "sample.tsv"
    generate(sample, 100_000)
    from aiayn.data.corpus import read_tsv
    from aiayn.tokenizers import SentencePiecePair

    pairs = read_tsv(sample)
    SentencePiecePair.train(pairs.sources, pairs.targets, vocab_size=8000).save(work / "tokenizer")
    for size in args.sizes:
        run_size(size, work, work / "tokenizer", args.steps)


if __name__ == "__main__":
    main()
