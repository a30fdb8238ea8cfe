"""Trained checkpoints timed against each other (e.g. a teacher and its distilled student): each translates the
same real sentences (``--input``, the first ``--sentences``) with ``Translator``, as ``aiayn translate`` does,
greedy and beam 4, each at batch 1 and 16; every model stops at its own end of sentence, so the figure is
sentences/s (one timed call per case and turn, after a warm-up call), and ``speedup_vs_FIRST`` compares each
checkpoint with the first one named. Engine against engine on the same weights is ``bench_engines.py``.

    python benchmarks/bench_checkpoints.py --checkpoints teacher=RUN student=RUN --input FILE [--sentences 200]
                                           [--shortlists NAME=FILE ...] [--repeats 3]

``--shortlists``: the checkpoint called NAME decodes with that lexical shortlist (``aiayn shortlist``); name
one run twice (``student=RUN student_sl=RUN --shortlists student_sl=FILE``) to time it with and without.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from common import emit

BEAM = 4
CHECKPOINT_CASES = [("greedy", 1), ("beam", 1), ("greedy", 16), ("beam", 16)]  # real sentences: beam 4 alone too


def seconds_per_call(fn, repeats: int = 1) -> float:
    """The mean wall time of ``fn`` over ``repeats`` calls after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def checkpoints(named: list[str], input_file: str, sentences: int, repeats: int,
                shortlists: dict[str, str] | None = None) -> None:
    """Sentences/s of each trained checkpoint on the same real sentences; each case's best of ``repeats``
    turns (the checkpoints take turns, so a slow spell of the machine hits them all). ``shortlists``: by
    checkpoint name, a shortlist file it decodes with."""
    from aiayn.data.corpus import read_lines
    from aiayn.inference.translator import Translator

    texts = read_lines(input_file)[:sentences]
    runs = dict(item.split("=", 1) for item in named)
    shortlists = shortlists or {}
    if set(shortlists) - set(runs):
        raise SystemExit(f"--shortlists: {', '.join(sorted(set(shortlists) - set(runs)))} not among --checkpoints")
    translators = {name: Translator.from_checkpoint(run, shortlist=shortlists.get(name)) for name, run in runs.items()}
    rates: dict[tuple[str, str], float] = {}
    for _ in range(repeats):
        for name, translator in translators.items():
            for strategy, batch in CHECKPOINT_CASES:
                beam = BEAM if strategy == "beam" else 1
                case = f"{strategy}{beam if beam > 1 else ''}/b{batch}/{len(texts)}sentences"
                seconds = seconds_per_call(partial(translator.translate, texts, batch, beam_size=beam))
                rates[case, name] = max(len(texts) / seconds, rates.get((case, name), 0.0))
    first = next(iter(runs))
    for (case, name), rate in rates.items():
        emit(f"{case}/{name}", "sentences_per_s", rate, "sentences/s")
        if name != first:
            emit(f"{case}/{name}", f"speedup_vs_{first}", rate / rates[case, first], "x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", nargs="+", metavar="NAME=RUN", required=True)
    parser.add_argument("--input", required=True, help="source sentences, one per line (plain or .gz)")
    parser.add_argument("--sentences", type=int, default=200, help="how many of --input's sentences")
    parser.add_argument("--repeats", type=int, default=1, help="turns; each figure the best of them")
    parser.add_argument("--shortlists", nargs="+", default=[], metavar="NAME=FILE",
                        help="the checkpoint NAME decodes with this shortlist (aiayn shortlist)")
    args = parser.parse_args()
    if any("=" not in item for item in args.checkpoints + args.shortlists):
        parser.error("--checkpoints NAME=RUN ... (and --shortlists NAME=FILE)")
    checkpoints(args.checkpoints, args.input, args.sentences, args.repeats,
                dict(item.split("=", 1) for item in args.shortlists))


if __name__ == "__main__":
    main()
