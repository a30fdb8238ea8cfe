"""Sequence-level knowledge distillation (Kim & Rush, 2016): a teacher translates the training sources, and
a student trains on the teacher's translations (``aiayn train --data DIR``).

The output folder is a corpus that ``--data`` reads: ``train.tsv`` (source<TAB>teacher's translation),
``valid.tsv`` and ``test.tsv`` (the real references: students are validated and tested against people, not
the teacher), and ``distill.json`` (what made it). Translation goes in chunks, each written atomically to
``parts/``; a run that is interrupted continues where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from aiayn.data.corpus import Parallel
from aiayn.data.datasets import Splits
from aiayn.io.files import atomic_write_text, output_folder


def _tsv(pairs: Parallel) -> str:
    return "".join(f"{s}\t{t}\n" for s, t in zip(pairs.sources, pairs.targets, strict=True))


def distill(translator, splits: Splits, output: str | Path, chunk: int = 1000, about: dict | None = None,
            progress: bool = True, overwrite: bool = False, batch_size: int = 64, **options) -> dict:
    """Translate ``splits.train.sources`` with ``translator`` (its decoding, with ``options`` replaced: its
    fields by name; ``batch_size`` sentences at a time) into the corpus folder ``output``.

    Returns the counts written to ``distill.json``: sentences, chunks computed now, chunks found done.
    """
    out = output_folder(output, "distill", overwrite, own_files=("distill.json", "parts"))
    decoding = translator.decoding.replace(**options)
    (out / "parts").mkdir(exist_ok=True)
    sources = splits.train.sources
    starts = range(0, len(sources), chunk)
    done = computed = 0
    for i, start in enumerate(tqdm(starts, unit="chunk", desc="distill", disable=not progress)):
        part = out / "parts" / f"{i:06d}.tsv"
        if part.is_file():
            done += 1
            continue
        batch = sources[start: start + chunk]
        outputs = translator.translate(batch, batch_size=batch_size, decoding=decoding)
        atomic_write_text(part, _tsv(Parallel(batch, outputs)))
        computed += 1
    parts = [(out / "parts" / f"{i:06d}.tsv").read_text(encoding="utf-8") for i in range(len(starts))]
    atomic_write_text(out / "train.tsv", "".join(parts))
    atomic_write_text(out / "valid.tsv", _tsv(splits.valid))
    if splits.test is not None and len(splits.test):
        atomic_write_text(out / "test.tsv", _tsv(splits.test))
    record = {**(about or {}), "beam_size": decoding.beam_size, "decoding": decoding.changes(),
              "sentences": len(sources), "chunks": len(starts),
              "chunks_computed": computed, "chunks_resumed": done}
    atomic_write_text(out / "distill.json", json.dumps(record, indent=2) + "\n")
    return record
