"""Synthetic sequence tasks that need no files (the copy task of the paper's tutorials)."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.data.batching import pad_batch
from aiayn.model.config import ModelConfig


def copy_batch(cfg: ModelConfig, batch: int, generator: torch.Generator, min_len: int = 5,
               max_len: int = 10, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """Random ids (above the specials) of length min_len..max_len; the target is the source (or reversed).

    Returns src (B, S) and tgt = ``<s> ... </s>`` (B, S+2), both right-padded. A CMLM's ``<mask>`` (a CTC model's
    blank) is never drawn.
    """
    first = 1 + max(*cfg.special_ids, *((cfg.mask_id,) if cfg.non_autoregressive else ()))
    srcs, tgts = [], []
    for _ in range(batch):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        ids = torch.randint(first, cfg.vocab_size, (n,), generator=generator).tolist()
        srcs.append(ids)
        tgts.append([cfg.bos_id, *(ids[::-1] if reverse else ids), cfg.eos_id])
    return pad_batch(srcs, cfg.pad_id), pad_batch(tgts, cfg.pad_id)
