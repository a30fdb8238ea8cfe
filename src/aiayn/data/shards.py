"""Token shards: a corpus tokenized once (``aiayn preprocess``) into binary files that training reads by
memory map, so a corpus larger than memory trains with the memory of one shard.

A shards folder (DATA) holds::

    shards.json            languages, id dtype, every shard's pair count; written last
    tokenizer/             the tokenizer the ids come from (training uses it)
    valid.tsv              the validation pairs as text (BLEU needs the references)
    train-00000.src.bin    the shard's source ids end to end (uint16 when the vocabulary fits, else uint32)
    train-00000.tgt.bin    its target ids (no BOS/EOS: added when a batch is built)
    train-00000.idx.npy    (n + 1, 2) int64 offsets: pair i's source is src[idx[i, 0]:idx[i + 1, 0]]
    train-00000.json       written after the three files: the shard is complete

Training plans batches from the lengths alone, one shuffled window of pairs at a time, and reads the tokens
of the batches its own process trains on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from aiayn.data.batching import token_batches
from aiayn.data.corpus import DataError
from aiayn.io.files import read_json

MANIFEST, FORMAT = "shards.json", "aiayn-shards-1"


def is_shards(spec: str | Path) -> bool:
    """Whether a data SPEC is a shards folder."""
    return (Path(spec) / MANIFEST).is_file()


def read_manifest(folder: str | Path) -> dict:
    """``shards.json``, checked: a folder that preprocess did not finish is an error saying so."""
    manifest = read_json(Path(folder) / MANIFEST)
    if manifest.get("format") != FORMAT or not isinstance(manifest.get("shards"), list):
        raise DataError(f"{Path(folder) / MANIFEST}: not an aiayn shards manifest ({FORMAT}); run aiayn preprocess")
    return manifest


class ShardReader:
    """One shard's ids, memory-mapped (nothing is read until a pair is asked for)."""

    def __init__(self, folder: Path, name: str, dtype: str) -> None:
        self.src = np.memmap(folder / f"{name}.src.bin", dtype=dtype, mode="r")
        self.tgt = np.memmap(folder / f"{name}.tgt.bin", dtype=dtype, mode="r")
        self.idx = np.load(folder / f"{name}.idx.npy", mmap_mode="r", allow_pickle=False)  # (n + 1, 2)

    def __len__(self) -> int:
        return self.idx.shape[0] - 1

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths of every pair: two (n,) int64 arrays."""
        lens = np.diff(self.idx, axis=0)  # (n, 2)
        return lens[:, 0], lens[:, 1]

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        (s0, t0), (s1, t1) = self.idx[i], self.idx[i + 1]
        return self.src[s0:s1].tolist(), self.tgt[t0:t1].tolist()


class ShardedPairs:
    """Every shard of a folder as one numbered collection of token pairs (global numbers, shard by shard).

    ``batches(epoch)`` visits the shards in a seeded order; a shard's pairs are shuffled and cut into
    windows of ``window`` pairs, and each window is bucketed by length into batches of at most
    ``max_tokens`` padded tokens (``token_batches``). Memory grows with the shard and window sizes, never
    with the corpus.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        self.readers = [ShardReader(self.folder, s["name"], manifest["dtype"]) for s in manifest["shards"]]
        self.starts = np.cumsum([0, *(len(r) for r in self.readers)])  # (shards + 1,) first global numbers
        self.too_long = int(manifest.get("too_long", 0))
        if self.starts[-1] == 0:
            raise DataError(f"{self.folder}: the shards hold no training pairs")

    def __len__(self) -> int:
        return int(self.starts[-1])

    def batches(self, epoch: int, max_len: int, max_tokens: int, seed: int, window: int = 100_000,
                tgt_extra: int = 2) -> Iterator[list[int]]:
        """Global pair numbers in batches; pairs longer than ``max_len`` on a side are left out and a
        target counts ``tgt_extra`` more tokens (BOS and EOS)."""
        gen = np.random.default_rng([seed, epoch])
        for shard in gen.permutation(len(self.readers)).tolist():
            src_lens, tgt_lens = self.readers[shard].lengths()
            order = gen.permutation(len(src_lens))  # (n,)
            for number, start in enumerate(range(0, len(order), window)):
                chunk = order[start: start + window]
                keep = chunk[(src_lens[chunk] <= max_len) & (tgt_lens[chunk] <= max_len)]
                plan = token_batches(src_lens[keep].tolist(), (tgt_lens[keep] + tgt_extra).tolist(), max_tokens,
                                     seed, epoch * 1_000_003 + shard * 1009 + number)
                offset = int(self.starts[shard])
                for batch in plan:
                    yield [offset + int(keep[j]) for j in batch]

    def pairs(self, numbers: list[int]) -> list[tuple[list[int], list[int]]]:
        """The (source ids, target ids) of global pair numbers."""
        shards = np.searchsorted(self.starts, numbers, side="right") - 1
        return [self.readers[s].pair(i - int(self.starts[s])) for s, i in zip(shards.tolist(), numbers, strict=True)]
