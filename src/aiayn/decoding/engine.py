"""The step-level decoding engine: groups of rows join a running batch, step together and leave.

A decoding strategy is a group of rows (:class:`Rows`): greedy or sampled continuations
(:class:`aiayn.decoding.greedy.TokenRows`), the beams of beam search (:class:`aiayn.decoding.beam.BeamRows`).
``aiayn.generate`` admits one group and steps until it is done; the server's scheduler (``serve/scheduler.py``)
admits a group per request between two steps and takes finished groups out, so a long request never holds up a
short one (the continuous batching of Orca and vLLM, written small). Rows of every group are left-padded to one
width; each keeps its own positions, its own source (encoder-decoder: its memory and cross-attention keys), and
never attends to padding, so a group's tokens are the ones it would get alone.

Between two steps, for the batch and for every group waiting to join: ``tokens`` (B, W) holds every row and the
cache holds columns 0..W-2 (the last column is what the next step reads). A group's prompt pass picks its first
tokens, so it joins with them.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from aiayn.decoding.core import Columns
from aiayn.model.packed import output_rows
from aiayn.model.state import DecodeState
from aiayn.model.transformer import TransformerModel


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
        prompt_cache: decoder-only: one-row prompts reuse the stored keys/values of their longest cached prefix
            and store their whole blocks (``aiayn.decoding.prefix``).
        prefill_chunk: a prompt with more columns than this to compute is computed this many a step, before the
            running rows' step (chunked prefill: the rows already running keep their pace); None: at once.
    """

    def __init__(self, model: TransformerModel, use_cache: bool = True, candidates: Tensor | None = None,
                 capacity: int | None = None, prompt_cache=None, prefill_chunk: int | None = None) -> None:
        self.model, self.use_cache, self.capacity, self.prompt_cache = model, use_cache, capacity, prompt_cache
        self.prefill_chunk = prefill_chunk
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
        tokens, state = self.model.start(inputs, group.longest, self.use_cache, beams)  # (b, t0)
        if self.columns.candidates is not None:
            state.output = output_rows(self.model.output, self.columns.candidates)
        if adapter:
            if self.model.adapter_rows is None:
                raise ValueError("adapter: this model has no adapters attached")
            state.adapters = torch.full((tokens.size(0),), adapter, dtype=torch.long, device=tokens.device)
        cacheable = not adapter and self.prompt_cache is not None and state.cache is not None and tokens.size(0) == 1
        if cacheable:
            cached = self.prompt_cache.load(tokens[0].tolist(), state.cache, 0)
        if self.prefill_chunk and state.cache is not None and tokens.size(1) - state.position > self.prefill_chunk:
            self.prefilling.append((group, tokens, state, cacheable))  # computed a chunk a step (prefill)
        else:
            self._ready(group, tokens, state, cacheable)
        return cached

    def _ready(self, group: Rows, tokens: Tensor, state: DecodeState, cacheable: bool) -> None:
        """The rest of a group's prompt computed in one pass that also picks its first tokens (a prefill yields a
        token, as in vLLM: no second pass for the last column); a cacheable prompt's whole blocks are stored. The
        group joins at the next step unless that token ended it."""
        scores = self.model.step(tokens, state, last=True)[:, -1].float()  # (b, V), or (b, C) with candidates
        if cacheable:
            self.prompt_cache.store(tokens[0].tolist(), state.cache, 0, tokens.size(1))
        tokens = _extend(tokens, state, *self._choose(scores, [group]))  # (b, t0 + 1)
        if not group.done:
            self.joining.append((group, tokens, state))

    def prefill(self) -> None:
        """The next ``prefill_chunk`` columns of the oldest prompt still computing; its last chunk yields its
        first tokens and it joins."""
        group, tokens, state, cacheable = self.prefilling[0]
        if tokens.size(1) - state.position > self.prefill_chunk:
            self.model.step(tokens[:, :state.position + self.prefill_chunk], state, last=True)  # the cache only
            return
        self.prefilling.pop(0)
        self._ready(group, tokens, state, cacheable)

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
        chooses its rows' next tokens."""
        if self.joining:
            self.join()
        if self.prefilling:
            self.prefill()  # a prompt that completes joins at the next step (one token a step per group)
        if not self.groups:  # every group admitted is still computing its prompt
            return
        scores = self.model.step(self.tokens, self.state, last=True)[:, -1].float()  # (B, V), or (B, C) with candidates
        self.tokens = _extend(self.tokens, self.state, *self._choose(scores, self.groups))  # (B, W+1)
        self.steps += 1

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
        if done:
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
