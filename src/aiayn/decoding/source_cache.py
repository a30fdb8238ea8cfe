"""A translator's prompt cache: the encoding of sources seen before (a language model's is ``decoding/prefix.py``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import NamedTuple

from torch import Tensor

SOURCE_CACHE_BYTES = 256 * 2**20  # a translator's default: ~10,000 source tokens of a base model (26 KB each)


class Encoded(NamedTuple):
    """One batch of sources as a :class:`SourceCache` keeps it."""

    memory: Tensor  # (B, S, D)
    cross: list[tuple[Tensor, Tensor]]  # each decoder layer's cross-attention keys and values (B, H, S, D)
    bytes: int
    tokens: int  # its source tokens (no padding)


class SourceCache:
    """A translator's prompt cache: what decoding reads of a batch of sources (the encoder's memory and every
    layer's cross-attention keys and values: ``Transformer.encoded``), kept under the SHA-256 of the batch's ids,
    so the same sources again skip the encoder. A whole batch is one entry: every memory position depends on
    every source token, and a batch's rows on its padding; so what it gives is what the encoder computes, and
    outputs are equal with it on and off. The least recently used go first past ``max_bytes``."""

    def __init__(self, model, max_bytes: int = SOURCE_CACHE_BYTES) -> None:
        if model.config.arch != "encoder-decoder":
            raise TypeError("a source cache is for encoder-decoder models (a language model's: PromptCache)")
        self.model, self.max_bytes = model, max_bytes
        self.kept: OrderedDict[bytes, Encoded] = OrderedDict()
        self.bytes = self.hits = self.misses = self.hit_tokens = 0

    def encoded(self, inputs: Tensor) -> tuple[tuple[Tensor, list[tuple[Tensor, Tensor]]], int]:
        """``Transformer.encoded(inputs)`` (B, S), kept or computed (then kept), and the source tokens it found
        kept (0: computed)."""
        ids = inputs.cpu().contiguous()
        key = hashlib.sha256(repr((tuple(ids.shape), str(ids.dtype))).encode() + ids.numpy().tobytes()).digest()
        if key in self.kept:
            self.kept.move_to_end(key)
            kept = self.kept[key]
            self.hits, self.hit_tokens = self.hits + 1, self.hit_tokens + kept.tokens
            return (kept.memory, kept.cross), kept.tokens
        memory, cross = self.model.encoded(inputs)
        size = sum(t.nbytes for t in (memory, *(t for kv in cross for t in kv)))
        tokens = int((ids != self.model.config.pad_id).sum())
        self.misses += 1
        if size <= self.max_bytes:
            self.kept[key], self.bytes = Encoded(memory, cross, size, tokens), self.bytes + size
            while self.bytes > self.max_bytes:
                self.bytes -= self.kept.popitem(last=False)[1].bytes
        return (memory, cross), 0

    @property
    def max_tokens(self) -> int:
        """About the source tokens the cap holds (the memory and every layer's cross-attention keys and values)."""
        cfg, size = self.model.config, next(self.model.parameters()).element_size()
        return self.max_bytes // ((1 + 2 * cfg.n_decoder_layers) * cfg.d_model * size)

    def stats(self) -> dict:
        return {"prefix_hits": self.hits, "prefix_misses": self.misses, "prefix_hit_tokens": self.hit_tokens,
                "prefix_cached_tokens": sum(kept.tokens for kept in self.kept.values()),
                "prefix_cache_bytes": self.bytes, "prefix_cache_max_bytes": self.max_bytes}
