"""Speculative greedy decoding against plain greedy decoding, one sentence at a time (the latency case).

Both decode the same sentences with the same main checkpoint (oneDNN-packed, float32, as ``Translator`` runs
it); the speculative run drafts ``k`` tokens with ``--draft`` (a smaller model trained with the same
tokenizers, or a CTC or CMLM model: the prophet, which drafts the whole translation in one pass) and checks them
in one main-model pass (``--k 0``: as many as the acceptance says, ``DraftLength``). Prints JSON lines {"config",
"metric", "value", "unit"}: sentences/s of each, the speedup, the acceptance rate, tokens per main-model pass, how
many outputs are identical (speculative greedy must equal plain greedy), sacreBLEU of each with ``--reference``,
and the draft's own time against the main's (a prophet's own one-pass translation).

    python benchmarks/bench_speculative.py --checkpoint RUN --draft DRAFT_RUN --input FILE [--reference FILE]
                                           [--sentences 200] [--k 1 2 4 0]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from common import emit as print_figure

from aiayn.data.corpus import read_lines
from aiayn.decoding import SpeculativeStats
from aiayn.evaluation import score
from aiayn.inference.translator import Translator

emit = partial(print_figure, digits=4)


def timed(translator: Translator, texts: list[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = translator.translate(texts, batch_size=1)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--input", required=True, help="source sentences, one per line (plain or .gz)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--reference", help="the reference translations, one per line: sacreBLEU of each run")
    parser.add_argument("--k", type=int, nargs="+", default=[4],
                        help="drafted tokens per main-model pass (0: adapted to the acceptance, the default of "
                             "aiayn translate --draft)")
    args = parser.parse_args()
    texts = read_lines(args.input)[: args.sentences]
    references = read_lines(args.reference)[: args.sentences] if args.reference else None
    plain = Translator.from_checkpoint(args.checkpoint, beam_size=1)
    plain.translate(texts[:5], batch_size=1)  # warm-up
    expected, t_plain = timed(plain, texts)
    base = f"greedy/batch1/{len(texts)}sentences"
    emit(f"{base}/plain", "sentences_per_s", len(texts) / t_plain, "sentences/s")
    if references:
        emit(f"{base}/plain", "sacrebleu", score(expected, references).bleu, "BLEU")
    draft_alone = Translator.from_checkpoint(args.draft, beam_size=1)
    draft_alone.translate(texts[:5], batch_size=1)
    emit(base, "draft_alone_time_vs_main", timed(draft_alone, texts)[1] / t_plain, "x")
    for k in args.k:
        fast = Translator.from_checkpoint(args.checkpoint, beam_size=1, draft=args.draft, draft_tokens=k or None)
        fast.translate(texts[:5], batch_size=1)
        fast.speculative = SpeculativeStats()  # count the measured sentences only
        got, t_fast = timed(fast, texts)
        config = f"{base}/k{k or 'adaptive'}"
        emit(f"{config}/speculative", "sentences_per_s", len(texts) / t_fast, "sentences/s")
        emit(config, "speedup_speculative_vs_plain", t_plain / t_fast, "x")
        emit(config, "acceptance_rate", fast.speculative.acceptance_rate, "")
        emit(config, "tokens_per_main_pass", fast.speculative.tokens_per_main_pass, "tokens")
        emit(config, "identical_outputs", sum(a == b for a, b in zip(expected, got, strict=True)), "sentences")
        if references:
            emit(f"{config}/speculative", "sacrebleu", score(got, references).bleu, "BLEU")


if __name__ == "__main__":
    main()
