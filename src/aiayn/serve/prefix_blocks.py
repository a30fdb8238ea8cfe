"""Prompt caching across requests, block by block (vLLM's automatic prefix caching, written small)."""

from __future__ import annotations

from collections import OrderedDict

from torch import Tensor


class PrefixBlocks:
    """Prompt caching across requests, block by block (vLLM's automatic prefix caching, written small).

    The keys/values of every whole block of ``block_size`` prompt tokens are kept under the tuple of all
    prompt tokens up to the block's end, so a shared system prompt is found whatever follows it. A memory
    cap evicts the least recently used blocks. Blocks are copied into a row's cache, never shared, so a row
    that leaves (finished or disconnected) holds nothing.
    """

    def __init__(self, block_size: int = 16, max_bytes: int = 64 * 2**20) -> None:
        self.block_size, self.max_bytes = block_size, max_bytes
        self.blocks: OrderedDict[tuple[int, ...], list[tuple[Tensor, Tensor]]] = OrderedDict()
        self.bytes = self.hits = self.misses = self.hit_tokens = 0

    def lookup(self, prompt: list[int], usable: int) -> list[list[tuple[Tensor, Tensor]]]:
        """The cached blocks that start ``prompt``, in order, covering at most ``usable`` tokens."""
        found, b = [], self.block_size
        for end in range(b, usable + 1, b):
            block = self.blocks.get(tuple(prompt[:end]))
            if block is None:
                break
            self.blocks.move_to_end(tuple(prompt[:end]))
            found.append(block)
        self.hits, self.misses = self.hits + bool(found), self.misses + (not found)
        self.hit_tokens += len(found) * b
        return found

    def store(self, prompt: list[int], cache, first_column: int, computed: int) -> None:
        """Keep the whole blocks among the first ``computed`` prompt tokens, read from ``cache`` (one row)
        where the prompt starts at column ``first_column``."""
        b = self.block_size
        for end in range(b, computed + 1, b):
            key = tuple(prompt[:end])
            if key in self.blocks:
                continue
            cols = slice(first_column + end - b, first_column + end)
            block = [(kv.k[:, :, cols].clone(), kv.v[:, :, cols].clone()) for kv in (la.self_kv for la in cache.layers)]
            self.blocks[key] = block
            self.bytes += sum(k.nbytes + v.nbytes for k, v in block)
        while self.bytes > self.max_bytes and self.blocks:
            _, block = self.blocks.popitem(last=False)
            self.bytes -= sum(k.nbytes + v.nbytes for k, v in block)

    def stats(self) -> dict:
        return {"prefix_hits": self.hits, "prefix_misses": self.misses, "prefix_hit_tokens": self.hit_tokens,
                "prefix_cached_tokens": len(self.blocks) * self.block_size, "prefix_cache_bytes": self.bytes}
