"""Batching by token count with length bucketing and seeded shuffling, so padding stays small."""

from __future__ import annotations

import torch
from torch import Tensor


def pad_batch(rows: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad lists of ids into a (B, max_len) long tensor."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def token_batches(src_lens: list[int], tgt_lens: list[int], max_tokens: int, seed: int, epoch: int,
                  shuffle: bool = True) -> list[list[int]]:
    """Group example indices into batches of at most ``max_tokens`` padded tokens per side.

    Examples are sorted by length (ties broken by a seeded shuffle), cut greedily into batches, and the
    batch order is shuffled with a generator seeded by (seed, epoch): the same arguments give the same
    batches. A single example longer than ``max_tokens`` still forms a batch of its own.
    """
    gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(src_lens), generator=gen).tolist() if shuffle else list(range(len(src_lens)))
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))  # stable: ties keep the shuffled order
    batches, current, width = [], [], 0
    for i in order:
        new_width = max(width, src_lens[i], tgt_lens[i])
        if current and new_width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, new_width = [], max(src_lens[i], tgt_lens[i])
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    if shuffle:
        batches = [batches[j] for j in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


def lm_blocks(streams: list[list[int]] | Tensor, block_size: int, eos_id: int) -> Tensor:
    """Concatenate token lists (each ended by EOS) and cut into (N, block_size + 1) rows for next-token
    training (input = row[:-1], labels = row[1:]); the remainder that does not fill a block is dropped.
    ``streams`` may also be the concatenated tokens already (a 1-D tensor)."""
    if isinstance(streams, Tensor):
        data = streams
    else:
        data = torch.tensor([tok for ids in streams for tok in (*ids, eos_id)], dtype=torch.long)
    n = (data.numel() - 1) // block_size
    if n <= 0:
        raise ValueError(f"language-model data: {data.numel()} tokens are fewer than one block of {block_size}")
    return data[: n * block_size + 1].unfold(0, block_size + 1, block_size)  # (N, block_size + 1)
