"""Greedy search and the token-by-token loop it shares with sampling (SPEC section 3)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.decoding.steppers import Stepper, start_tokens
from aiayn.models import TransformerModel

Chooser = Callable[[Tensor], Tensor]  # (B, V) scores with forbidden tokens at -inf -> (B,) next ids


@torch.no_grad()
def decode_loop(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int, choose: Chooser,
                min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None) -> list[list[int]]:
    """Append one token per step, picked by ``choose``, until EOS or the row's limit.

    Returns, per row, the generated ids without BOS and without the final EOS. BOS and PAD are never
    generated; EOS is not allowed before ``min_new_tokens``; ``max_new_tokens`` may be a (B,) tensor.
    ``prompt_cache`` (decoder-only, batch 1) supplies the keys/values of a stored prompt prefix.
    """
    cfg = model.config
    batch = src_ids.size(0)
    tokens = start_tokens(model, src_ids)  # (B, t0)
    start = tokens.size(1)
    limits = torch.as_tensor(max_new_tokens, device=src_ids.device).expand(batch)  # (B,)
    longest = int(limits.max())
    step = Stepper(model, src_ids, batch, start + longest, use_cache, prompt_cache=prompt_cache)
    done = limits <= 0
    for i in range(longest):
        logits = forbid(step(tokens).float(), cfg, i < min_new_tokens)  # (B, V)
        nxt = choose(logits).masked_fill(done, cfg.pad_id)  # (B,)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (B, t+1)
        done |= (nxt == cfg.eos_id) | (limits <= i + 1)
        if bool(done.all()):
            break
    return [_strip(row, cfg.eos_id, cfg.pad_id) for row in tokens[:, start:].tolist()]


def forbid(logits: Tensor, cfg, no_eos: bool) -> Tensor:
    """BOS and PAD are never generated; EOS not while ``no_eos`` (min length). Works on (..., V)."""
    logits[..., [cfg.bos_id, cfg.pad_id]] = float("-inf")
    if no_eos:
        logits[..., cfg.eos_id] = float("-inf")
    return logits


def greedy_search(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int,
                  min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None) -> list[list[int]]:
    """Arg-max at every step. ``src_ids``: source ids (encoder-decoder) or the prompt (decoder-only)."""
    return decode_loop(model, src_ids, max_new_tokens, lambda s: s.argmax(dim=-1), min_new_tokens, use_cache,
                       prompt_cache)


def _strip(row: list[int], eos_id: int, pad_id: int) -> list[int]:
    """Cut a generated row at its first EOS (or padding)."""
    for i, tok in enumerate(row):
        if tok in (eos_id, pad_id):
            return row[:i]
    return row
