"""Greedy search: arg-max of the next-token distribution at every step (SPEC section 3)."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.decoding.steppers import Stepper, start_tokens
from aiayn.models import TransformerModel


@torch.no_grad()
def greedy_search(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int,
                  min_new_tokens: int = 0, use_cache: bool = True) -> list[list[int]]:
    """Generate from ``src_ids`` (source ids for an encoder-decoder, the prompt for a decoder-only model).

    Returns, per row, the generated ids without BOS and without the final EOS. BOS is never generated;
    EOS is not allowed before ``min_new_tokens``; ``max_new_tokens`` may be a (B,) tensor of per-row limits.
    """
    cfg = model.config
    batch = src_ids.size(0)
    tokens = start_tokens(model, src_ids)  # (B, t0)
    start = tokens.size(1)
    limits = torch.as_tensor(max_new_tokens, device=src_ids.device).expand(batch)  # (B,)
    longest = int(limits.max())
    step = Stepper(model, src_ids, batch, start + longest, use_cache)
    done = limits <= 0
    for i in range(longest):
        logits = step(tokens)  # (B, V)
        logits[:, [cfg.bos_id, cfg.pad_id]] = float("-inf")  # never generated
        if i < min_new_tokens:
            logits[:, cfg.eos_id] = float("-inf")
        nxt = logits.argmax(dim=-1).masked_fill(done, cfg.pad_id)  # (B,)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (B, t+1)
        done |= (nxt == cfg.eos_id) | (limits <= i + 1)
        if bool(done.all()):
            break
    return [_strip(row, cfg.eos_id, cfg.pad_id) for row in tokens[:, start:].tolist()]


def _strip(row: list[int], eos_id: int, pad_id: int) -> list[int]:
    """Cut a generated row at its first EOS (or padding)."""
    for i, tok in enumerate(row):
        if tok in (eos_id, pad_id):
            return row[:i]
    return row
