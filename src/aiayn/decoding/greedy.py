"""Greedy search and the token-by-token loop it shares with sampling (SPEC section 3)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.decoding.core import Stepper, strip
from aiayn.model.transformer import TransformerModel

Chooser = Callable[[Tensor], Tensor]  # (B, V) scores with forbidden tokens at -inf -> (B,) columns picked


@torch.no_grad()
def decode_loop(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int, choose: Chooser,
                min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None,
                on_token: Callable[[Tensor, Tensor], None] | None = None,
                candidates: Tensor | None = None) -> list[list[int]]:
    """Append one token per step, picked by ``choose``, until EOS or the row's limit.

    Returns, per row, the generated ids without BOS and without the final EOS. BOS and PAD are never
    generated; EOS is not allowed before ``min_new_tokens``; ``max_new_tokens`` may be a (B,) tensor.
    ``prompt_cache`` (decoder-only, batch 1) supplies the keys/values of a stored prompt prefix.
    ``on_token(next_ids (B,), live (B,) bool)`` is called after every step (streaming); ``live`` is False for
    rows that had already finished. ``candidates`` (C,): the only ids that may be generated (a shortlist).
    """
    cfg = model.config
    limits = torch.as_tensor(max_new_tokens, device=src_ids.device).expand(src_ids.size(0))  # (B,)
    longest = int(limits.max())
    step = Stepper(model, src_ids, longest, use_cache, prompt_cache=prompt_cache, candidates=candidates)
    tokens = step.start_tokens  # (B, t0)
    start = tokens.size(1)
    done = limits <= 0
    for i in range(longest):
        logits = step.forbid(step(tokens).float(), i < min_new_tokens)  # (B, V), or (B, C) with candidates
        nxt = step.token_ids(choose(logits)).masked_fill(done, cfg.pad_id)  # (B,)
        if on_token is not None:
            on_token(nxt, ~done)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (B, t+1)
        done |= (nxt == cfg.eos_id) | (limits <= i + 1)
        if bool(done.all()):
            break
    return [strip(row, cfg.eos_id, cfg.pad_id) for row in tokens[:, start:].tolist()]


def greedy_search(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int,
                  min_new_tokens: int = 0, use_cache: bool = True, prompt_cache=None,
                  on_token: Callable[[Tensor, Tensor], None] | None = None,
                  candidates: Tensor | None = None) -> list[list[int]]:
    """Arg-max at every step. ``src_ids``: source ids (encoder-decoder) or the prompt (decoder-only)."""
    return decode_loop(model, src_ids, max_new_tokens, lambda s: s.argmax(dim=-1), min_new_tokens, use_cache,
                       prompt_cache, on_token, candidates)
