"""How a prompt cache's blocks lie in memory (``decoding/prefix.py``): a prompt's new blocks copied out a run at
a time, per layer one tensor with the blocks views of it, and a later prompt's blocks read back as few views as
lie one after another (one copy into its row, or none when shared)."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

_RUN_IDS = itertools.count()  # each stored run of blocks its own number (copy_runs)
Block = list[tuple[Tensor, Tensor] | None]  # per layer: the block's keys and values (1, H, block_size, D) or None


def consecutive(indices: list[int]) -> list[list[int]]:
    """``indices`` (increasing) as runs of consecutive ones: [0, 1, 2, 5, 6] -> [[0, 1, 2], [5, 6]]."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def tensors_of(block: Block) -> list[Tensor]:
    return [t for kv in block if kv is not None for t in kv]


def copy_runs(new: dict[int, Block], b: int, most: int) -> tuple[dict[int, Block], dict[int, tuple[int, int]]]:
    """``new`` blocks (by end position; views into a row's cache) as copies of their own: per layer, each run of
    at most ``most`` consecutive blocks is copied once, and its blocks are views of that copy (so that a later load
    of the run is one copy too: :func:`spans_of`). Also each block's place: (its run, its index in the run), the
    same in every layer that holds the whole run."""
    copied = {end: [None] * len(block) for end, block in new.items()}
    runs = [run[i:i + most] for run in consecutive([end // b for end in new]) for i in range(0, len(run), most)]
    places: dict[int, tuple[int, int]] = {}
    for run in runs:
        ends = [i * b for i in run]
        token = next(_RUN_IDS)
        places.update({end: (token, i) for i, end in enumerate(ends)})
        for j in range(len(new[ends[0]])):
            parts = [new[end][j] for end in ends]
            if any(kv is None for kv in parts):  # a sliding layer's ring lost some: each block apart
                for end, kv in zip(ends, parts, strict=True):
                    copied[end][j] = None if kv is None else (kv[0].clone(), kv[1].clone())
                continue
            keys = torch.cat([k for k, _ in parts], 2)  # (1, H, n*b, D): one copy of the run
            values = torch.cat([v for _, v in parts], 2)
            for i, end in enumerate(ends):
                copied[end][j] = (keys[:, :, i * b:(i + 1) * b], values[:, :, i * b:(i + 1) * b])
    return copied, places


def spans_of(parts: list[tuple[Tensor, Tensor]]) -> list[tuple[int, Tensor, Tensor]]:
    """Keys and values (1, H, t, D) of consecutive positions as few tensors: (index of the first part, keys,
    values), one for each stretch of parts that lie one after another in one copy (blocks stored together: a
    view spanning them, no copy)."""
    spans: list[list[int]] = []
    for i, (k, _) in enumerate(parts):
        if spans and _follows(parts[i - 1][0], k):
            spans[-1].append(i)
        else:
            spans.append([i])
    return [(span[0], one_view([parts[i][0] for i in span]), one_view([parts[i][1] for i in span])) for span in spans]


def _follows(p: Tensor, q: Tensor) -> bool:
    """Whether view ``q`` starts where view ``p`` ends, in the same copy (along dimension 2)."""
    return (q.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() and q.stride() == p.stride()
            and q.storage_offset() == p.storage_offset() + p.size(2) * p.stride(2))


def one_view(views: list[Tensor]) -> Tensor:
    """One view over ``views`` that follow each other (:func:`_follows`)."""
    first, last = views[0], views[-1]
    length = (last.storage_offset() - first.storage_offset()) // first.stride(2) + last.size(2)  # they follow
    return first.as_strided((first.size(0), first.size(1), length, first.size(3)), first.stride(),
                            first.storage_offset())
