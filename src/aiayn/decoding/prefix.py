"""Prompt (prefix) caching for the decoder-only model, block by block (vLLM's automatic prefix caching, written
small): the one store that the library's decoding (``generate(..., prompt_cache=)``) and the server's scheduler
(``serve/scheduler.py``) both use, through the engine (``decoding/engine.py``).

The keys/values of every whole block of ``block_size`` prompt tokens are kept under a key that stands for all
prompt tokens up to the block's end (the SHA-256 of the key before it and the block's tokens: vLLM's chained
block hashes, linear in the prompt's length, and not to be collided by a client), so a shared system prompt is
found whatever follows it; past the last whole block
that matches, the leading tokens a stored block shares with the prompt are reused too (a token-level match, as
SGLang's radix tree and llama.cpp's slots give: the keys of a token depend only on the tokens before it). A byte
cap evicts the least recently used blocks that no row reads. A prompt's new blocks are copied out a run at a time
(per layer one tensor, the blocks views of it), so a later prompt copies the run into its row at once; with
``share``, a one-row prompt reads them where they lie instead (never written: ``KVCache.share``, attention a part
at a time) until its row joins a batch. Outputs equal computing everything, to rounding
(tests/decoding/test_prefix.py).
"""

from __future__ import annotations

import hashlib
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterator

import torch
from torch import Tensor

from aiayn.decoding.block_runs import Block, consecutive, copy_runs, one_view, spans_of, tensors_of
from aiayn.model.cache import DecoderCache
from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.kv_int8 import dense


class PromptCache:
    """Least-recently-used blocks of prompt keys/values for one decoder-only model.

    Args:
        model: the model whose keys/values are kept (``add`` runs it).
        block_size: prompt tokens a block holds; only whole blocks are kept.
        max_bytes: the cap on the blocks' keys and values; the least recently used that no row reads go first.
        share: a one-row prompt's full layers on the CPU read the blocks where they are kept (``KVCache.share``),
            never writing them: no copy of the prefix per row (memory), but attention a part at a time at every
            step, which measures 4-5 ms slower a pass than one copy on SmolLM2 and Gemma 3 (docs/serving.md);
            else (and for sliding layers, or rows padded in front) they are copied into its cache.
    """

    def __init__(self, model: DecoderOnly, block_size: int = 16, max_bytes: int = 64 * 2**20,
                 share: bool = False) -> None:
        if not isinstance(model, DecoderOnly):
            raise TypeError("prompt caching is for decoder-only models")
        self.model, self.block_size, self.max_bytes, self.share = model, block_size, max_bytes, share
        self.held: dict[int, int] = {}  # a copy's address -> the rows' caches reading it (KVCache.share)
        self.places: dict[int, tuple[int, int]] = {}  # a kept block's id -> its run and its index in it (copy_runs)
        self.blocks: OrderedDict[bytes, Block] = OrderedDict()  # a block's key (keys_of) -> its keys and values
        self.tokens: dict[bytes, tuple[int, ...]] = {}  # a kept block's key -> its own tokens
        self.parents: dict[bytes, bytes] = {}  # a kept block's key -> the key before it (ROOT: the first)
        self.children: dict[bytes, set[bytes]] = {}  # a key -> the kept blocks after it
        self.bytes = self.hits = self.misses = self.hit_tokens = 0
        self.users: dict[int, int] = {}  # a copy's address -> the kept blocks that view it

    @torch.no_grad()
    def add(self, prefix: list[int]) -> None:
        """Compute ``prefix`` and keep its whole blocks (a system prompt, before any request)."""
        weight = next(self.model.parameters())
        cache = self.model.new_cache(1, len(prefix), weight)
        self.model.decode(torch.tensor([prefix], dtype=torch.long, device=weight.device), cache=cache)
        self.store(prefix, cache, 0, len(prefix))

    def fill(self, prompt: Tensor, cache: DecoderCache) -> int:
        """Copy the cached blocks that start ``prompt`` (1, T) into ``cache`` (one row); return the positions
        filled (0 if none). At least one prompt token is left for the model, so a step still yields logits."""
        return self.load(prompt[0].tolist(), cache, 0)

    def load(self, prompt: list[int], cache: DecoderCache, first_column: int) -> int:
        """Copy the cached blocks that start ``prompt`` into ``cache`` (one row) from column ``first_column``
        (left padding before it), then the leading tokens of a block that shares them (:meth:`partial`); return
        the columns filled, ``first_column`` included (0 if none)."""
        (blocks, keys), b = self.lookup(prompt, len(prompt) - 1), self.block_size
        blocks = blocks[:_usable(blocks, [layer.self_kv.window for layer in cache.layers], b)]
        tail, shared = self.partial(prompt, keys[len(blocks) - 1] if blocks else ROOT, len(blocks) * b,
                                    len(prompt) - 1)
        reused = len(blocks) * b + shared
        if shared:
            blocks.append([(k[:, :, :shared], v[:, :, :shared]) for k, v in tail])
        together = self._together(blocks)
        for j, layer in enumerate(cache.layers):  # each run of consecutive blocks in one copy per layer
            kv = layer.self_kv
            if kv.window is None:  # a full layer holds every block, stored as every full layer stores them
                spans = [(first_column + run[0] * b, one_view([blocks[i][j][0] for i in run]),
                          one_view([blocks[i][j][1] for i in run])) for run in together]
            else:
                held = [i for i, block in enumerate(blocks) if block[j] is not None]
                spans = [(first_column + (run[0] + first) * b, keys, values)  # a run stored together: one view
                         for run in consecutive(held) for first, keys, values in spans_of([blocks[i][j] for i in run])]
            if (self.share and spans and first_column == 0 and kv.window is None and kv.k.size(0) == 1
                    and kv.k.device.type == "cpu" and not kv.quantized):  # (merged attention's kernel is the CPU's)
                kv.share([(keys, values) for _, keys, values in spans], self._holding(kv, spans))
                continue
            for start, keys, values in spans:  # copied into the row
                kv.write(start, keys, values)
        filled = first_column + reused if blocks else 0
        for layer in cache.layers:
            layer.self_kv.written(filled)
        self.hits, self.misses = self.hits + bool(blocks), self.misses + (not blocks)
        self.hit_tokens += reused
        return filled

    def _together(self, blocks: list[Block]) -> list[list[int]]:
        """``blocks`` (consecutive prompt blocks) as runs of indices that lie one after another in one stored copy
        (in every full layer: :func:`copy_runs`); a block of no known place (a part of one) is a run of its own."""
        runs: list[list[int]] = []
        last = None
        for i, block in enumerate(blocks):
            place = self.places.get(id(block))
            if runs and place is not None and last is not None and place == (last[0], last[1] + 1):
                runs[-1].append(i)
            else:
                runs.append([i])
            last = place
        return runs

    def partial(self, prompt: list[int], parent: bytes, start: int, usable: int) -> tuple[Block | None, int]:
        """The stored block after ``prompt[:start]`` (whose key is ``parent``) that shares the most leading tokens
        with the prompt's next ones (at most ``usable - start``), and how many it shares (0: none). Only a block
        every layer holds."""
        best, shared, b = None, 0, self.block_size
        ahead = prompt[start:min(start + b, usable)]
        for key in self.children.get(parent, ()):
            n = next((i for i, (x, y) in enumerate(zip(self.tokens[key], ahead, strict=False)) if x != y),
                     len(ahead))
            block = self.blocks[key]
            if n > shared and all(kv is not None for kv in block):
                best, shared = block, n
        return best, shared

    def lookup(self, prompt: list[int], usable: int) -> tuple[list[Block], list[bytes]]:
        """The cached blocks that start ``prompt``, in order, covering at most ``usable`` tokens, and their keys."""
        found, keys = [], []
        for key in keys_of(prompt, usable, self.block_size):
            block = self.blocks.get(key)
            if block is None:
                break
            self.blocks.move_to_end(key)
            found.append(block)
            keys.append(key)
        return found, keys

    def key(self, tokens: list[int]) -> bytes:
        """The key of the block that ends ``tokens`` (whole blocks of them)."""
        *_, key = keys_of(tokens, len(tokens), self.block_size)
        return key

    def store(self, prompt: list[int], cache: DecoderCache, first_column: int, computed: int) -> None:
        """Keep the whole blocks among the first ``computed`` prompt tokens, read from ``cache`` (one row)
        where the prompt starts at column ``first_column``. A sliding layer's ring holds only its latest
        positions: a block it no longer holds keeps None for that layer (a later, fuller copy replaces it)."""
        b, new = self.block_size, {}
        keys = list(keys_of(prompt, computed, b))
        sliding = [j for j, layer in enumerate(cache.layers) if layer.self_kv.window is not None] if keys else []
        for end, key in zip(range(b, computed + 1, b), keys, strict=True):
            start = first_column + end - b
            old = self.blocks.get(key)
            if old is not None and all(old[j] is not None for j in sliding):
                continue  # kept whole already (a full layer's keys and values are in every kept block)
            block = [_float(la.self_kv.read(start, start + b)) for la in cache.layers]
            if any(kv is None for kv, la in zip(block, cache.layers, strict=True) if la.self_kv.window is None):
                continue  # not computed yet
            if old is not None and sum(kv is None for kv in old) <= sum(kv is None for kv in block):
                continue
            new[end] = block
        most = max(1, self.max_bytes // (8 * b * token_bytes(self.model)))  # blocks one copy holds:
        copied, places = copy_runs(new, b, most)  # an eighth of the cap at most, so that eviction frees what it counts
        for end, block in copied.items():
            key, parent = keys[end // b - 1], keys[end // b - 2] if end > b else ROOT
            old = self.blocks.get(key)
            if old is not None:
                self._release(old)
            self._hold(block)
            self.blocks[key], self.places[id(block)] = block, places[end]
            self.tokens[key], self.parents[key] = tuple(prompt[end - b:end]), parent
            self.children.setdefault(parent, set()).add(key)
        self._evict()

    def _evict(self) -> None:
        """Drop the least recently used blocks that no row reads (``held``) until the cap holds, or none is left."""
        if self.bytes <= self.max_bytes:
            return
        for key in [key for key, block in self.blocks.items()
                    if not any(t.untyped_storage().data_ptr() in self.held for t in tensors_of(block))]:
            if self.bytes <= self.max_bytes:
                return
            self._release(self.blocks.pop(key))
            parent = self.parents.pop(key)
            del self.tokens[key]
            siblings = self.children[parent]
            siblings.discard(key)
            if not siblings:
                del self.children[parent]

    def _holding(self, kv, spans: list[tuple[int, Tensor, Tensor]]) -> weakref.finalize:
        """Count a row's cache ``kv`` as reading the copies ``spans`` view until it lets them go or is freed (the
        blocks of a copy it reads are not evicted meanwhile); returns what lets go."""
        ptrs = {t.untyped_storage().data_ptr() for _, k, v in spans for t in (k, v)}
        for ptr in ptrs:
            self.held[ptr] = self.held.get(ptr, 0) + 1
        return weakref.finalize(kv, self._unhold, ptrs)

    def _unhold(self, ptrs: set[int]) -> None:
        for ptr in ptrs:
            self.held[ptr] -= 1
            if not self.held[ptr]:
                del self.held[ptr]
        self._evict()

    def _hold(self, block: Block) -> None:
        """Count ``block``'s memory: the copies its keys and values are views of, each once (``bytes``)."""
        for tensor in tensors_of(block):
            storage = tensor.untyped_storage()
            users = self.users.get(storage.data_ptr(), 0)
            self.bytes += 0 if users else storage.nbytes()
            self.users[storage.data_ptr()] = users + 1

    def _release(self, block: Block) -> None:
        """Stop counting ``block``: a copy no kept block views any longer is freed, and its bytes go."""
        self.places.pop(id(block), None)
        for tensor in tensors_of(block):
            storage = tensor.untyped_storage()
            self.users[storage.data_ptr()] -= 1
            if not self.users[storage.data_ptr()]:
                del self.users[storage.data_ptr()]
                self.bytes -= storage.nbytes()

    @property
    def max_tokens(self) -> int:
        """The prompt tokens the cap holds."""
        return self.max_bytes // token_bytes(self.model)

    def stats(self) -> dict:
        return {"prefix_hits": self.hits, "prefix_misses": self.misses, "prefix_hit_tokens": self.hit_tokens,
                "prefix_cached_tokens": len(self.blocks) * self.block_size, "prefix_cache_bytes": self.bytes,
                "prefix_cache_max_bytes": self.max_bytes}


ROOT = b""  # the key before a prompt's first block


def keys_of(prompt: list[int], end: int, b: int) -> Iterator[bytes]:
    """The keys of the whole blocks of ``b`` tokens in ``prompt[:end]``, in order: each the SHA-256 of the key
    before it (``ROOT`` for the first) and the block's tokens, so that it stands for every token up to the block's
    end (a key of all those tokens themselves cost time quadratic in the prompt: 3 ms a lookup at 1,887 tokens)."""
    key = ROOT
    for start in range(0, end - b + 1, b):
        key = hashlib.sha256(key + array("q", prompt[start:start + b]).tobytes()).digest()
        yield key


def token_bytes(model: DecoderOnly) -> int:
    """The bytes one prompt token's keys and values take in every layer (as the model's weights are stored)."""
    cfg = model.config
    return cfg.n_decoder_layers * 2 * model.cache_heads * cfg.d_head * next(model.parameters()).element_size()


def sized_for(model: DecoderOnly, context: int, contexts: int = 4, share: float = 1 / 8) -> int:
    """A prompt cache's default cap for ``model``: ``contexts`` whole contexts of ``context`` tokens (a few long
    system prompts or documents, each kept whole), at most ``share`` of this machine's memory."""
    import os

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(contexts * context * token_bytes(model), share * memory))


def _usable(blocks: list[Block], windows: list[int | None], b: int) -> int:
    """How many of the leading ``blocks`` can be loaded: every sliding layer (``windows``) must find the blocks
    its window reaches back to from their end."""
    m = len(blocks)
    while m and any(blocks[i][j] is None for j, w in enumerate(windows) if w is not None
                    for i in range(max(0, (m * b - w + 1) // b), m)):
        m -= 1
    return m


def _float(kv: tuple | None) -> tuple[Tensor, Tensor] | None:
    """A block's keys and values as float tensors (an int8 cache's rows dequantized: the blocks are kept, shared and
    copied as float tensors; written back into an int8 cache they quantize to the same rows)."""
    return None if kv is None else (dense(kv[0]), dense(kv[1]))
