"""The step-level decoding engine: groups of rows join a running batch, step together and leave.

A decoding strategy is a group of rows (:class:`Rows`): greedy or sampled continuations (``greedy.py``), beams
(``beam.py``), drafted rows (``drafted.py``: speculative decoding, a verifying pass a step). ``aiayn.generate``
admits one group and steps until it is done; the server's scheduler admits a group per request between two steps
and takes finished groups out (Orca's and vLLM's continuous batching, written small). Rows are left-padded to one
width; each keeps its own positions, its own source (encoder-decoder), and never attends to padding, so a group's
tokens are the ones it would get alone. Between two steps: ``tokens`` (B, W) holds every row and the cache holds
columns 0..W-2 (the last column is what the next step reads). A group's prompt pass picks its first tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from aiayn.decoding.chunks import ALONE_CHUNK, ChunkSizer
from aiayn.decoding.core import Columns
from aiayn.decoding.drafted import drafted_tails, verify_pass
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.source_cache import SourceCache
from aiayn.model.packed import output_rows
from aiayn.model.state import DecodeState
from aiayn.model.transformer import TransformerModel

STORE_EVERY = 256  # a chunked prompt's blocks go to the prompt cache each time this many more columns are computed


class Rows(Protocol):
    """A group of rows that join the engine together and leave together, when ``done``."""

    size: int  # rows in the batch
    longest: int  # the most new tokens any of its rows may take
    steps: int  # steps taken so far

    @property
    def done(self) -> bool: ...

    def cancel(self) -> None:
        """Finish every row now (its rows leave at the next :meth:`Engine.remove_done`)."""

    def advance(self, scores: Tensor, columns: Columns) -> tuple[Tensor, Tensor | None]:
        """Scores (size, V) or (size, C) of this step, float, in place -> the next token ids (size,) and, for
        beam search, which of its rows each row continues (size,) (None: row i continues row i)."""


class Engine:
    """Decodes groups of rows on ``model`` in one batch.

    Args:
        use_cache: keep keys/values between steps (rows can only join a running batch with a cache).
        candidates: (C,) the only token ids that may be generated (a vocabulary shortlist, for every group).
        capacity: the most positions the batch's KV cache may take (a server's bound: the longest prompt +
            continuation a row may reach); :meth:`fits` says whether a newcomer keeps within it. Each join or
            leave sizes the cache to what the rows still need. None: no bound (the library's single group).
        prompt_cache: decoder-only, a ``PromptCache``: one-row prompts reuse the stored keys/values of their longest
            cached prefix and store their whole blocks; encoder-decoder, a ``SourceCache``: sources seen before
            skip the encoder (``aiayn.decoding.prefix``, ``aiayn.decoding.source_cache``).
        prefill_chunk: a prompt with more columns than this (and than ``long_prefill``) to compute is computed
            this many a step, inside the running rows' pass (chunked prefill: the rows already running keep their
            pace); None: at once.
        long_prefill: prompts with at most this many columns to compute are computed at once, whatever
            ``prefill_chunk`` (vLLM's long-prefill threshold: a short prompt costs the running rows one longer step).
        prefill_budget: how long a step carrying a chunk may take, as a multiple of the running rows' step alone,
            from their passes timed by ``clock`` (``decoding/chunks.py::ChunkSizer``); None or 0:
            ``prefill_chunk`` columns at the start, fewer further on, whatever they cost.
        clock: seconds, for those measurements (tests script it).
    """

    def __init__(self, model: TransformerModel, use_cache: bool = True, candidates: Tensor | None = None,
                 capacity: int | None = None, prompt_cache=None, prefill_chunk: int | None = None,
                 long_prefill: int = 0, prefill_budget: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.model, self.use_cache, self.capacity, self.prompt_cache = model, use_cache, capacity, prompt_cache
        self.prefill_chunk, self.long_prefill, self.clock = prefill_chunk, long_prefill, clock
        self.chunks = ChunkSizer(model.config, prefill_chunk or 0, prefill_budget)
        self.prefilling: list[tuple[Rows, Tensor, DecodeState, bool]] = []  # admitted, prompt still computing
        self.columns = Columns(model.config, candidates)
        self.groups: list[Rows] = []
        self.joining: list[tuple[Rows, Tensor, DecodeState]] = []  # admitted, joining at the next step
        self.tokens: Tensor | None = None  # (B, W)
        self.state: DecodeState | None = None
        self.steps = 0

    @property
    def rows(self) -> int:
        return sum(group.size for group in self.groups) + sum(g.size for g, *_ in self.joining + self.prefilling)

    def fits(self, width: int, group: Rows) -> bool:
        """Whether every row, a newcomer of ``width`` start columns included, can reach its limit within
        ``capacity`` cache positions."""
        waiting = self.joining + self.prefilling
        if self.capacity is None or not (self.groups or waiting):
            return True
        widths = [width] + [t.size(1) for _, t, *_ in waiting] + ([] if self.tokens is None else [self.tokens.size(1)])
        return self._room(max(widths), [*self.groups, *(g for g, *_ in waiting), group]) <= self.capacity

    @torch.no_grad()
    def admit(self, group: Rows, inputs: Tensor, beams: int = 1, adapter: int = 0) -> int:
        """Start ``group`` on ``inputs`` (B, S): sources, or right-padded prompts (each stands for ``beams`` rows).
        Its start columns are computed alone (from the prompt cache where it can), with its first tokens; its
        rows join the running batch at the next step, with every group admitted since (one copy of the batch for
        all of them).
        ``adapter``: the LoRA adapter its rows run (``model/multi_lora.py``; 0, the base model). Returns the
        prompt tokens the prompt cache served (0: none)."""
        if group.done:
            return 0
        cached = 0
        if isinstance(self.prompt_cache, SourceCache):  # a translator's: the sources' encoding kept
            encoded, cached = self.prompt_cache.encoded(inputs)
            tokens, state = self.model.start(inputs, group.longest, self.use_cache, beams, encoded=encoded)
        else:
            tokens, state = self.model.start(inputs, group.longest, self.use_cache, beams)  # (b, t0)
        if self.columns.candidates is not None:
            state.output = output_rows(self.model.output, self.columns.candidates)
        if adapter:
            if self.model.runtime.adapter_rows is None:
                raise ValueError("adapter: this model has no adapters attached")
            state.adapters = torch.full((tokens.size(0),), adapter, dtype=torch.long, device=tokens.device)
        cacheable = (not adapter and isinstance(self.prompt_cache, PromptCache) and state.cache is not None
                     and tokens.size(0) == 1)
        if cacheable:
            cached = self.prompt_cache.load(tokens[0].tolist(), state.cache, 0)
        if self.prefill_chunk and state.cache is not None and (
                tokens.size(1) - state.position > max(self.prefill_chunk, self.long_prefill)):
            self.prefilling.append((group, tokens, state, cacheable))  # computed a chunk a step (prefill)
        else:
            self._ready(group, tokens, state, cacheable)
        return cached

    def _ready(self, group: Rows, tokens: Tensor, state: DecodeState, cacheable: bool) -> None:
        """The rest of a group's prompt computed in one pass that also picks its first tokens (a prefill yields a
        token, as in vLLM: no second pass for the last column)."""
        self._first(group, tokens, state, cacheable, self.model.step(tokens, state, last=True))

    def _first(self, group: Rows, tokens: Tensor, state: DecodeState, cacheable: bool, scores: Tensor) -> None:
        """A group's prompt is in its cache and ``scores`` (b, 1, V) are its last column's: a cacheable prompt's
        whole blocks are stored, its first tokens chosen; it joins at the next step unless that token ended it."""
        if cacheable:
            self.prompt_cache.store(tokens[0].tolist(), state.cache, 0, tokens.size(1))
        tokens = _extend(tokens, state, *self._choose(scores[:, -1].float(), [group]))  # (b, t0 + 1)
        if not group.done:
            self.joining.append((group, tokens, state))

    def _chunk(self) -> tuple[Tensor, DecodeState, bool]:
        """The oldest prompt still computing: its columns up to the end of its next chunk (``prefill_chunk``
        columns beside running rows, ``ALONE_CHUNK`` at least when none run), its state, and whether that
        chunk ends the prompt (the group is then taken out of ``prefilling``)."""
        _, tokens, state, _ = self.prefilling[0]
        size = self.chunks.size(state.position) if self.groups else max(self.prefill_chunk, ALONE_CHUNK)
        last = tokens.size(1) - state.position <= size
        if last:
            self.prefilling.pop(0)
        return tokens[:, :state.position + size], state, last

    def start_width(self, inputs: Tensor) -> int:
        """Start columns of a row of ``inputs``: BOS for a translation, the prompt for a language model."""
        return 1 if self.model.config.arch == "encoder-decoder" else inputs.size(1)

    def join(self) -> None:
        """Append the joining groups' rows to the batch, each left-padded to the widest, into one cache sized to
        what the rows still need. A lone group is adopted as it is (the library's decode: no copy)."""
        joining, self.joining = self.joining, []
        if not self.groups and len(joining) == 1:
            group, self.tokens, self.state = joining[0]
            self.groups.append(group)
            return
        parts = ([] if self.tokens is None else [(self.tokens, self.state)]) + [(t, st) for _, t, st in joining]
        if any(state.cache is None for _, state in parts):
            raise ValueError("use_cache=False: rows join a running batch only with a KV cache")
        width = max(tokens.size(1) for tokens, _ in parts)
        self.groups.extend(group for group, _, _ in joining)
        self.state = DecodeState.assemble([(st, None, width - t.size(1)) for t, st in parts],
                                          self._room(width, self.groups))
        self.tokens = torch.cat([_pad_front(t, width, self.model.config.pad_id) for t, _ in parts])  # (B, W)

    def _room(self, width: int, groups: list[Rows]) -> int:
        """Cache positions that rows ``width`` wide need to reach every group's limit."""
        return width - 1 + max([0] + [g.longest - g.steps for g in groups])

    @torch.no_grad()
    def step(self) -> None:
        """One decoding step for every row (the groups admitted since the last step join first): each group
        chooses its rows' next tokens. A prompt still computing adds its next chunk to the same pass (vLLM's
        mixed batch: the running rows keep their pace); its last chunk picks its first tokens, and it joins at
        the next step."""
        if self.joining:
            self.join()
        tails = drafted_tails(self) if self.groups else None
        if tails is not None:  # speculative decoding: a verifying pass (``drafted.py``)
            verify_pass(self, tails)
        waiting = self.prefilling[0] if self.prefilling else None
        stepping = self.groups and tails is None  # a plain step of the running rows (else only a chunk, if any)
        if waiting is not None and stepping and self.chunks.probe():
            waiting = None  # the running rows' step alone, measured again
        chunk = None if waiting is None else self._chunk()
        parts = ([(self.tokens, self.state)] if stepping else []) + ([chunk[:2]] if chunk else [])
        if not parts:
            return
        position = 0 if chunk is None else chunk[1].position  # the chunk's first column
        started = self.clock()
        scores = ([self.model.step(*parts[0], last=True)] if len(parts) == 1
                  else self.model.step_together(parts))  # each part's last column: (b, 1, V), or (b, 1, C)
        if stepping:
            columns = 0 if chunk is None else chunk[0].size(1) - position
            self.chunks.measure(self.clock() - started, columns, position)
            chosen = self._choose(scores[0][:, -1].float(), self.groups)
            self.tokens = _extend(self.tokens, self.state, *chosen)  # (B, W+1)
            self.steps += 1
        if chunk is not None:
            self._chunk_scored(waiting, chunk, position, scores[-1])

    def _chunk_scored(self, waiting, chunk, position: int, scores: Tensor) -> None:
        """A prompt's chunk from column ``position`` is computed (``scores``: its last column's): its last chunk
        picks its first tokens; a long one's blocks go to the prompt cache as they are done."""
        group, tokens, state, cacheable = waiting
        if chunk[2]:
            self._first(group, tokens, state, cacheable, scores)
        elif cacheable and position // STORE_EVERY != state.position // STORE_EVERY:  # no pause for all at the end
            self.prompt_cache.store(tokens[0].tolist(), state.cache, 0, state.position)

    def _choose(self, scores: Tensor, groups: list[Rows]) -> tuple[Tensor, Tensor | None]:
        """Each of ``groups`` (whose rows ``scores`` (B, V) holds, in order) picks its rows' next tokens: the
        tokens (B,) and, when a beam search reordered its rows, the row each row continues (B,) (None: every row
        its own)."""
        nexts, orders, start = [], [], 0
        for group in groups:
            nxt, order = group.advance(scores[start: start + group.size], self.columns)
            nexts.append(nxt)
            orders.append((start, group.size, order))
            start += group.size
        index = None
        if any(order is not None for _, _, order in orders):
            index = torch.cat([torch.arange(first, first + size, device=scores.device) if order is None
                               else order + first for first, size, order in orders])  # (B,)
        return torch.cat(nexts), index

    def remove_done(self) -> list[Rows]:
        """Take the finished groups out (their rows leave the batch); return them."""
        done = [group for group in self.groups if group.done]
        self.remove(done)
        return done

    def remove(self, leaving: list[Rows]) -> None:
        """Take these groups' rows out of the batch, then the padding columns every remaining row has in front."""
        self.joining = [j for j in self.joining if j[0] not in leaving]
        self.prefilling = [p for p in self.prefilling if p[0] not in leaving]
        leaving = [group for group in leaving if group in self.groups]
        if not leaving:
            return
        keep, start = [], 0
        for group in self.groups:
            if group not in leaving:
                keep.extend(range(start, start + group.size))
            start += group.size
        self.groups = [group for group in self.groups if group not in leaving]
        if not self.groups:
            self.tokens = self.state = None
            return
        index = torch.tensor(keep, device=self.tokens.device)
        left = self.state.left_pad
        common = 0 if left is None else int(left.index_select(0, index).min())  # padding every row has in front
        width = self.tokens.size(1) - common
        self.tokens = self.tokens.index_select(0, index)[:, common:]  # (B', W - common)
        self.state = DecodeState.assemble([(self.state, index, -common)], self._room(width, self.groups))

    def run(self) -> None:
        """Step until every group is done (the library's decode: one group, no newcomers)."""
        while self.groups or self.joining or self.prefilling:
            self.step()
            self.remove_done()


def run(model: TransformerModel, group: Rows, inputs: Tensor, beams: int = 1, use_cache: bool = True,
        candidates: Tensor | None = None, prompt_cache=None) -> Rows:
    """Decode one ``group`` on ``inputs`` (B, S) to its end (each input stands for ``beams`` rows); return it."""
    engine = Engine(model, use_cache, candidates, prompt_cache=prompt_cache)
    engine.admit(group, inputs, beams)
    engine.run()
    return group


def _extend(tokens: Tensor, state: DecodeState, nexts: Tensor, index: Tensor | None) -> Tensor:
    """Rows ``tokens`` (B, W) and their ``state`` reordered by ``index`` (beams move within their own sentence
    only), then ``nexts`` (B,) appended: (B, W+1)."""
    if index is not None:
        tokens = tokens.index_select(0, index)
        state.reorder(index, within_groups=True)
    return torch.cat([tokens, nexts[:, None]], dim=1)


def _pad_front(tokens: Tensor, width: int, pad_id: int) -> Tensor:
    """Rows (b, t) left-padded with ``pad_id`` to ``width`` columns."""
    if tokens.size(1) == width:
        return tokens
    return torch.cat([tokens.new_full((tokens.size(0), width - tokens.size(1)), pad_id), tokens], dim=1)
