"""Recipe and decoding choices checked on both halves of a validation set, as issue 38 asks: a change is kept
only when it gains on the first half *and* on the second, not on the whole set alone.

Each system (``NAME=CHECKPOINT[:option=value,...]``, as in bench_nat.py: decoding options of ``DecodingConfig``)
translates the source once; sacreBLEU (and, with ``--tokenized-bleu LANG``, the paper's tokenized BLEU) is
scored on the whole set, its first half and its second half. Every system after the first is compared with
the first: its gain on each part, and ``holds_on_both_halves`` (1 when it gains on both halves, else 0).
Prints JSON lines {"config", "metric", "value", "unit"}.

    python scripts/recipe_halves.py --source val.en.gz --reference val.de.gz --system base=runs/a \\
        --system beam4=runs/a:beam_size=4,length_penalty=1.0 --system other=runs/b [--tokenized-bleu de]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' system parsing
from bench_nat import emit, parse_system

from aiayn.data.corpus import read_lines
from aiayn.evaluation import score, tokenized_bleu
from aiayn.inference.translator import Translator


def parts(count: int) -> dict[str, slice]:
    """The whole set and its two halves (the first half takes the middle line of an odd count)."""
    middle = (count + 1) // 2
    return {"all": slice(0, count), "half1": slice(0, middle), "half2": slice(middle, count)}


def part_scores(hyps: list[str], references: list[str], lang: str | None) -> dict[str, float]:
    """{"all/sacrebleu": ..., "half1/sacrebleu": ..., ...} (and "/tokenized_bleu" with ``lang``)."""
    found = {}
    for part, lines in parts(len(references)).items():
        found[f"{part}/sacrebleu"] = score(hyps[lines], references[lines]).bleu
        if lang:
            found[f"{part}/tokenized_bleu"] = tokenized_bleu(hyps[lines], references[lines], lang)
    return found


def compare(name: str, found: dict[str, float], base: dict[str, float]) -> None:
    """The gain of ``found`` over ``base`` on each part, and whether it holds on both halves (per metric)."""
    for key, value in found.items():
        emit(name, f"{key}_gain", value - base[key], "BLEU")
    for metric in sorted({key.split("/")[1] for key in found}):
        both = all(found[f"{h}/{metric}"] > base[f"{h}/{metric}"] for h in ("half1", "half2"))
        emit(name, f"{metric}_holds_on_both_halves", float(both), "bool")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="source sentences (plain or .gz)")
    parser.add_argument("--reference", required=True, help="their references")
    parser.add_argument("--system", action="append", required=True, help="NAME=CHECKPOINT[:option=value,...]")
    parser.add_argument("--tokenized-bleu", dest="tokenized_bleu", default=None, metavar="LANG")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=64)
    args = parser.parse_args()
    sources, references = read_lines(args.source), read_lines(args.reference)
    base = None
    for text in args.system:
        name, checkpoint, options = parse_system(text)
        translator = Translator.from_checkpoint(checkpoint, decoding=options)
        found = part_scores(translator.translate(sources, batch_size=args.batch_size), references,
                            args.tokenized_bleu)
        for key, value in found.items():
            emit(name, key, value, "BLEU")
        if base is None:
            base = found
        else:
            compare(name, found, base)


if __name__ == "__main__":
    main()
