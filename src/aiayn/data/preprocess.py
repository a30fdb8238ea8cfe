"""``aiayn preprocess``: tokenize a corpus once into token shards (format: ``aiayn.data.shards``).

The corpus streams through (any size); worker processes encode chunks of pairs while this process writes
them in order, a shard at a time, each file through a temp name and a rename. A shard is complete when its
``.json`` exists: an interrupted run, started again, keeps the complete shards and redoes the rest.
``shards.json`` is written last, so a folder without it is never mistaken for a finished one.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from aiayn.data.corpus import clean_pair
from aiayn.data.datasets import stream_splits
from aiayn.data.shards import FORMAT, MANIFEST
from aiayn.io.files import atomic_directory, atomic_path, atomic_write_text, output_folder
from aiayn.tokenizers import TokenizerPair, load_tokenizers

_WORKER_TOKENIZERS: TokenizerPair | None = None


def _start_worker(folder: str) -> None:
    global _WORKER_TOKENIZERS
    _WORKER_TOKENIZERS = load_tokenizers(folder)


def _encode(chunk: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A chunk of pairs encoded (in a worker): source ids end to end (uint32), source lengths (int64), and
    the same for the targets."""
    tok, out = _WORKER_TOKENIZERS, []
    for encoder, texts in ((tok.src, [s for s, _ in chunk]), (tok.tgt, [t for _, t in chunk])):
        rows = encoder.encode_batch(texts)
        out += [np.fromiter(itertools.chain.from_iterable(rows), dtype=np.uint32),
                np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))]
    return out[0], out[1], out[2], out[3]


def _chunks(pairs: Iterator[tuple[str, str]], size: int, counts: dict) -> Iterator[list[tuple[str, str]]]:
    """Cleaned pairs in lists of ``size``; empty pairs are counted in ``counts['empty']`` and left out."""
    chunk = []
    for source, target in pairs:
        pair = clean_pair(source, target)
        if pair is None:
            counts["empty"] += 1
            continue
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class ShardWriter:
    """Appends encoded pairs to one shard's temp files; ``close`` renames them and writes the marker."""

    def __init__(self, folder: Path, name: str, dtype: str, max_len: int) -> None:
        self.folder, self.name, self.dtype, self.max_len = folder, name, dtype, max_len
        self.files = {side: open(folder / f".{name}.{side}.bin.tmp", "wb")  # noqa: SIM115 (closed by close)
                      for side in ("src", "tgt")}
        self.lengths: list[np.ndarray] = []  # (n, 2) per chunk
        self.too_long = 0

    def add(self, src: np.ndarray, src_lens: np.ndarray, tgt: np.ndarray, tgt_lens: np.ndarray) -> None:
        """Append a chunk's pairs (ids end to end and lengths per side); pairs longer than ``max_len`` on a
        side are counted and left out."""
        keep = (src_lens <= self.max_len) & (tgt_lens <= self.max_len)  # (n,)
        self.too_long += int((~keep).sum())
        src[np.repeat(keep, src_lens)].astype(self.dtype).tofile(self.files["src"])
        tgt[np.repeat(keep, tgt_lens)].astype(self.dtype).tofile(self.files["tgt"])
        self.lengths.append(np.stack([src_lens[keep], tgt_lens[keep]], axis=1))  # (kept, 2)

    def close(self) -> dict:
        for side, f in self.files.items():
            f.close()
            os.replace(f.name, self.folder / f"{self.name}.{side}.bin")
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros((0, 2), dtype=np.int64)
        offsets = np.zeros((len(lengths) + 1, 2), dtype=np.int64)  # (n + 1, 2)
        np.cumsum(lengths, axis=0, out=offsets[1:])
        with atomic_path(self.folder / f"{self.name}.idx.npy") as tmp:
            np.save(tmp, offsets, allow_pickle=False)
        record = {"name": self.name, "pairs": len(lengths), "too_long": self.too_long,
                  "src_tokens": int(offsets[-1, 0]), "tgt_tokens": int(offsets[-1, 1])}
        atomic_write_text(self.folder / f"{self.name}.json", json.dumps(record) + "\n")
        return record


def preprocess(spec: str, tokenizer: str | Path, output: str | Path, src_lang: str | None = None,
               tgt_lang: str | None = None, data_dir: str | None = None, valid: str | None = None,
               shard_size: int = 1_000_000, workers: int | None = None, max_len: int = 256, chunk: int = 5000,
               progress: bool = True, overwrite: bool = False) -> dict:
    """Tokenize the corpus SPEC with the tokenizers in ``tokenizer`` into the shards folder ``output``.

    Returns the manifest written to ``shards.json``.
    """
    out = output_folder(output, "preprocess", overwrite, own_files=(MANIFEST, "tokenizer"))
    tokenizers = load_tokenizers(tokenizer)
    if not (out / "tokenizer").is_dir():
        with atomic_directory(out / "tokenizer", "preprocess") as tmp:
            tokenizers.save(tmp)
    dtype = "uint16" if max(len(tokenizers.src), len(tokenizers.tgt)) <= 2**16 else "uint32"
    pairs, valid_pairs = stream_splits(spec, src_lang, tgt_lang, data_dir, valid)
    atomic_write_text(out / "valid.tsv", "".join(f"{s}\t{t}\n" for s, t in
                                                 zip(valid_pairs.sources, valid_pairs.targets, strict=True)))
    counts = {"empty": 0}
    shards, workers = [], workers or os.cpu_count() or 1
    chunks = _chunks(pairs, chunk, counts)
    per_shard = max(1, shard_size // chunk)
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold OpenMP threads
    with context.Pool(workers, _start_worker, (str(out / "tokenizer"),)) as pool, \
            tqdm(unit="pair", desc="preprocess", disable=not progress, unit_scale=True) as bar:
        for number in itertools.count():
            group = list(itertools.islice(chunks, per_shard))
            if not group:
                break
            shards.append(_shard(out, f"train-{number:05d}", group, pool, dtype, max_len))
            bar.update(sum(len(c) for c in group))
    manifest = {"format": FORMAT, "data": spec, "src_lang": src_lang, "tgt_lang": tgt_lang, "dtype": dtype,
                "max_len": max_len, "pairs": sum(s["pairs"] for s in shards), "empty": counts["empty"],
                "too_long": sum(s["too_long"] for s in shards), "valid_pairs": len(valid_pairs),
                "shards": shards}
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def _shard(out: Path, name: str, group: list[list[tuple[str, str]]], pool, dtype: str, max_len: int) -> dict:
    """One shard from its chunks of pairs, or the record of the complete one an earlier run wrote."""
    if (out / f"{name}.json").is_file():
        return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    writer = ShardWriter(out, name, dtype, max_len)
    for encoded in pool.imap(_encode, group):
        writer.add(*encoded)
    return writer.close()

