"""Sampling: temperature, top-k and top-p (nucleus) filtering, with a seeded generator."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.decoding.greedy import TokenRows
from aiayn.model.transformer import TransformerModel


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Scale by 1/temperature, keep the ``top_k`` best (0 = all) and the smallest set whose probability
    reaches ``top_p``; everything else becomes -inf. (B, V) -> (B, V)."""
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1], got {top_p}")
    scaled = logits / temperature
    if not bool(torch.isfinite(scaled[torch.isfinite(logits)]).all()):  # a temperature so small the scaled scores
        best = logits.max(dim=-1, keepdim=True).values  # overflow: its limit, the likeliest tokens alone
        scaled = torch.zeros_like(logits).masked_fill(logits < best, float("-inf"))
    logits = scaled
    if 0 < top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability mass ranked above each token
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False  # the likeliest token is always kept (a top_p that rounds to 0 included)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def draw(logits: Tensor, generator: torch.Generator, temperature: float = 1.0, top_k: int = 0,
         top_p: float = 1.0, pad_last: bool = False) -> Tensor:
    """One token per row of (B, V) logits, drawn from the filtered softmax with ``generator``: (B,) ids.

    ``pad_last``: the last column is a padding row aiayn appended to an imported vocabulary (never
    generated); it takes no part in the draw, so that a seed draws what Hugging Face draws over the
    checkpoint's own vocabulary (``torch.multinomial`` takes one random number per column)."""
    if pad_last:
        logits = logits[:, :-1]  # (B, V - 1)
    probs = filter_logits(logits, temperature, top_k, top_p).softmax(dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def pad_is_last(cfg, width: int) -> bool:
    """Whether scores of ``width`` columns end with the padding row of an imported vocabulary (``padding_row``)."""
    return cfg.padding_row and width == cfg.target_vocab


def sampled_rows(model: TransformerModel, limits: Tensor, min_new_tokens: int = 0, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None, on_token=None,
                 constraints: list | None = None) -> TokenRows:
    """Rows (limits (B,)) that each draw their next token with one generator seeded by ``seed`` (random when
    None): the engine group of sampling."""
    gen = torch.Generator(device=limits.device)
    gen.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))

    def choose(scores: Tensor) -> Tensor:
        return draw(scores, gen, temperature, top_k, top_p, pad_is_last(model.config, scores.size(-1)))

    cfg = model.config
    return TokenRows(limits, choose, cfg.eos_id, cfg.pad_id, min_new_tokens, on_token, constraints)
