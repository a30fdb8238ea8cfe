"""Non-autoregressive against autoregressive translation, measured the same way: sacreBLEU, latency at batch 1,
sentences/s at batch 16 and 64, for each system on the same test sets, one after the other in one run.

A system is ``NAME=CHECKPOINT[:option=value,...]`` with decoding options of ``DecodingConfig``, e.g.
``teacher-greedy=runs/teacher:beam_size=1`` or ``cmlm-T4-l3=runs/cmlm:iterations=4,length_beam=3``
(a CMLM checkpoint decodes with Mask-Predict), and ``draft=RUN`` for speculative decoding with that draft model.
``--valid-source/--valid-reference``: a second set scored too (sacreBLEU and chrF at the largest batch, not timed).
Prints JSON lines {"config", "metric", "value", "unit"}.

    python benchmarks/bench_nat.py --source test.de.gz --reference test.en.gz --system A=RUN:beam_size=4 \\
        --system B=CMLM_RUN:iterations=10,length_beam=5 [--valid-source val.de.gz --valid-reference val.en.gz] \\
        [--latency-sentences 100] [--batches 16 64] [--device cuda]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from common import emit as print_figure

from aiayn.data.corpus import read_lines
from aiayn.evaluation import score
from aiayn.inference.translator import Translator

emit = partial(print_figure, digits=4)


def parse_system(text: str) -> tuple[str, str, dict]:
    """NAME=CHECKPOINT[:k=v,...] -> (name, checkpoint, options) with ints and floats read as numbers."""
    name, _, rest = text.partition("=")
    checkpoint, _, given = rest.partition(":")
    options = {}
    for pair in filter(None, given.split(",")):
        key, _, value = pair.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else float(value) if "." in value else value
    return name, checkpoint, options


def measure(name: str, translator: Translator, sources: list[str], references: list[str], args) -> None:
    """sacreBLEU and chrF of the translations at the largest batch, its sentences/s and the other batches' (and
    the validation set's scores), then the latency per sentence at batch 1 over the first sentences (each
    after a warm-up)."""
    batches = sorted(args.batches, reverse=True)
    translator.translate(sources[: batches[0]], batch_size=batches[0])  # warm-up (a GPU's first kernels)
    for i, batch in enumerate(batches):
        start = time.perf_counter()
        hyps = translator.translate(sources, batch_size=batch)
        emit(f"{name}/batch{batch}", "sentences_per_s", len(sources) / (time.perf_counter() - start), "sentences/s")
        if i == 0:
            emit_scores(name, hyps, references)
    if args.valid_source:
        valid = translator.translate(read_lines(args.valid_source), batch_size=batches[0])
        emit_scores(f"{name}/valid", valid, read_lines(args.valid_reference))
    few = sources[: args.latency_sentences]
    translator.translate(few[:5], batch_size=1)  # warm-up
    start = time.perf_counter()
    translator.translate(few, batch_size=1)
    emit(name, "latency_batch1", (time.perf_counter() - start) / len(few) * 1000, "ms/sentence")


def emit_scores(name: str, hyps: list[str], references: list[str]) -> None:
    found = score(hyps, references)
    emit(name, "sacrebleu", found.bleu, "BLEU")
    emit(name, "chrf", found.chrf, "chrF")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="source sentences (plain or .gz)")
    parser.add_argument("--reference", required=True, help="their references")
    parser.add_argument("--system", action="append", required=True, help="NAME=CHECKPOINT[:option=value,...]")
    parser.add_argument("--latency-sentences", type=int, default=100, dest="latency_sentences")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--valid-source", dest="valid_source", help="a second set, scored only")
    parser.add_argument("--valid-reference", dest="valid_reference", help="its references")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    sources, references = read_lines(args.source), read_lines(args.reference)
    for text in args.system:
        name, checkpoint, options = parse_system(text)
        draft = options.pop("draft", None)
        translator = Translator.from_checkpoint(checkpoint, args.device, draft=draft, decoding=options)
        measure(name, translator, sources, references, args)


if __name__ == "__main__":
    main()
