"""A lexical shortlist (Jean et al., 2015; Marian's ``--shortlist``): decode over a few hundred candidate
target tokens instead of the whole vocabulary, the output projection cut to their rows.

A batch's candidates are the ``frequent`` most frequent target tokens, plus, for every token of its sources,
the ``per_token`` target tokens most associated with that source token in a parallel corpus, plus EOS.
Association is the Dice coefficient of sentence co-occurrence, 2 c(s, t) / (c(s) + c(t)): high for a word
and its translation, low for a pair that meets only because one of the two is everywhere (those frequent
words are in the list anyway). Built once from a corpus (``aiayn shortlist``), stored as safetensors, used by
``Translator(shortlist=...)`` and ``aiayn translate / evaluate --shortlist FILE``. Decoding then scores only
the candidates; every other token gets -inf (``aiayn.decoding.core.Columns``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from aiayn.io.files import atomic_path


@dataclass(frozen=True)
class Shortlist:
    """Candidate target tokens for a batch of sources.

    Attributes:
        frequent: (N,) long, the most frequent target ids, candidates for every batch.
        table: (V_src, K) long, row s: the K target ids most associated with source id s (-1 = none).
    """

    frequent: Tensor
    table: Tensor

    @cached_property
    def vocab_bound(self) -> int:
        """One more than the largest target id listed."""
        return 1 + max((int(x.max()) for x in (self.frequent, self.table) if x.numel()), default=-1)

    def candidates(self, src_ids: Tensor, pad_id: int, eos_id: int) -> Tensor:
        """The target ids (C,) sorted, that a batch of sources (B, S) (padded with ``pad_id``) may produce:
        the frequent ones, each real source token's associated ones, and EOS."""
        real = src_ids[src_ids != pad_id].cpu()  # (n,)
        if real.numel() and int(real.max()) >= self.table.size(0):
            raise ValueError(f"shortlist: source id {int(real.max())} is outside its table of "
                             f"{self.table.size(0)}; build the shortlist with this checkpoint's tokenizer")
        listed = self.table[real.unique()].flatten()  # (n*K,)
        chosen = torch.zeros(max(self.vocab_bound, eos_id + 1), dtype=torch.bool)  # (V',) marks, no sort needed
        chosen[self.frequent] = True
        chosen[listed[listed >= 0]] = True
        chosen[eos_id] = True
        return chosen.nonzero().squeeze(1).to(src_ids.device)  # (C,), sorted

    def save(self, path: str | Path) -> None:
        """Write the two tables to a safetensors file, atomically."""
        with atomic_path(path) as tmp:
            save_file({"frequent": self.frequent.contiguous(), "table": self.table.contiguous()}, str(tmp))

    @classmethod
    def load(cls, path: str | Path, target_vocab: int | None = None) -> Shortlist:
        """Read a file written by :meth:`save` (no pickle); with ``target_vocab``, every id must fit it."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such shortlist file; build one with aiayn shortlist")
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{path}: not a shortlist file ({err}); build one with aiayn shortlist") from None
        if set(tensors) != {"frequent", "table"} or tensors["table"].dim() != 2 or tensors["frequent"].dim() != 1:
            raise ValueError(f"{path}: not a shortlist file (it needs a 1-D 'frequent' and a 2-D 'table')")
        shortlist = cls(tensors["frequent"].long(), tensors["table"].long())
        top = shortlist.vocab_bound - 1
        if target_vocab is not None and top >= target_vocab:
            raise ValueError(f"{path}: target id {top} is outside the model's vocabulary of {target_vocab}; "
                             f"build the shortlist with this checkpoint's tokenizer")
        return shortlist


def build_shortlist(pairs: Iterable[tuple[list[int], list[int]]], src_vocab: int, tgt_vocab: int,
                    frequent: int = 200, per_token: int = 100) -> Shortlist:
    """Count a tokenized parallel corpus (source ids, target ids per pair) into a :class:`Shortlist`."""
    keys, targets = [], []
    src_sentences = torch.zeros(src_vocab, dtype=torch.long)  # c(s): sentences holding s
    tgt_sentences = torch.zeros(tgt_vocab, dtype=torch.long)  # c(t)
    for src, tgt in pairs:
        if not src or not tgt:
            continue
        s, t = torch.tensor(src).unique(), torch.tensor(tgt).unique()  # (n,), (m,)
        src_sentences[s] += 1
        tgt_sentences[t] += 1
        targets.extend(tgt)
        keys.append((s[:, None] * tgt_vocab + t[None, :]).flatten())  # (n*m,): one key per co-occurring pair
    table = torch.full((src_vocab, per_token), -1, dtype=torch.long)
    if keys:
        pair, together = torch.cat(keys).unique(return_counts=True)  # (P,), c(s, t)
        s, t = pair // tgt_vocab, pair % tgt_vocab
        dice = 2 * together / (src_sentences[s] + tgt_sentences[t])  # (P,)
        s, t, rank = _rank_within(s, t, dice)
        keep = rank < per_token
        table[s[keep], rank[keep]] = t[keep]
    tokens = torch.bincount(torch.tensor(targets, dtype=torch.long), minlength=tgt_vocab)  # (V_tgt,)
    seen = int((tokens > 0).sum())
    return Shortlist(tokens.argsort(descending=True, stable=True)[:min(frequent, seen)], table)


def _rank_within(group: Tensor, item: Tensor, score: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Sort (group, item) pairs by group, best score first within a group; each pair's rank in its group."""
    order = score.argsort(descending=True, stable=True)
    order = order[group[order].argsort(stable=True)]  # by group, the score order kept within each
    group, item = group[order], item[order]
    first = torch.searchsorted(group, group)  # (P,): where each pair's group starts
    return group, item, torch.arange(group.numel()) - first
