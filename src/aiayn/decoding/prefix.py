"""Prompt (prefix) caching for the decoder-only model: reuse the keys/values of a shared prefix.

A request whose prompt starts with a stored prefix copies that prefix's cache and runs the model only on
the rest of its prompt; outputs are identical to computing everything (tests/test_decoding.py).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor

from aiayn.model.cache import DecoderCache
from aiayn.model.transformer import DecoderOnly


class PromptCache:
    """Least-recently-used store of prefix -> KV cache for one decoder-only model."""

    def __init__(self, model: DecoderOnly, max_entries: int = 16) -> None:
        if not isinstance(model, DecoderOnly):
            raise TypeError("prompt caching is for decoder-only models")
        self.model, self.max_entries = model, max_entries
        self.entries: OrderedDict[tuple[int, ...], DecoderCache] = OrderedDict()
        self.hits = 0

    @torch.no_grad()
    def add(self, prefix: list[int]) -> None:
        """Compute and store the cache of ``prefix``."""
        weight = next(self.model.parameters())
        ids = torch.tensor([prefix], dtype=torch.long, device=weight.device)
        cache = self.model.new_cache(1, len(prefix), weight)
        self.model.decode(ids, cache=cache)
        self.entries[tuple(prefix)] = cache
        self.entries.move_to_end(tuple(prefix))
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def fill(self, prompt: Tensor, cache: DecoderCache) -> int:
        """Copy the longest stored prefix of ``prompt`` (1, T) into ``cache``; return its length (0 if none).

        At least one prompt token is left for the model, so the first step still yields logits.
        """
        ids = tuple(prompt[0].tolist())
        best = max((p for p in self.entries if len(p) < len(ids) and ids[: len(p)] == p), key=len, default=None)
        if best is None:
            return 0
        self.entries.move_to_end(best)
        cache.copy_prefix(self.entries[best], len(best))
        self.hits += 1
        return len(best)
