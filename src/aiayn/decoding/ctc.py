"""Best-path decoding of a CTC model (``aiayn.model.transformer.CTC``; Libovický & Helcl, 2018): one decoder pass
over the upsampled source, the likeliest label at every position (a token or the blank), then repeats collapsed and
blanks dropped (Graves et al., 2006). No length prediction: the collapse decides the length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.decoding.core import forbid
from aiayn.model.masks import padding_mask
from aiayn.model.nonautoregressive import CTC


@dataclass(frozen=True)
class Alignment:
    """One sentence's best path (for pictures): what each upsampled position emits (``blank`` for the blank),
    its probability, and whether the collapse keeps it."""

    emitted: list[int]
    probabilities: list[float]
    kept: list[bool]
    blank: int


def kept_positions(path: list[int], blank: int) -> list[bool]:
    """For each position of ``path``, whether :func:`collapse` keeps its label (the first of a run, not blank)."""
    return [label != blank and (i == 0 or path[i - 1] != label) for i, label in enumerate(path)]


def collapse(path: list[int], blank: int) -> list[int]:
    """CTC's many-to-one map: merge each run of equal labels into one, then drop the blanks
    (``a a - a b b -`` -> ``a a b``)."""
    return [label for label, kept in zip(path, kept_positions(path, blank), strict=True) if kept]


@torch.no_grad()
def best_path(model: CTC, src_ids: Tensor, max_new_tokens: Tensor | None = None,
              alignments: list[Alignment] | None = None) -> list[list[int]]:
    """The translation of each row of ``src_ids`` (B, S), right-padded: one parallel pass.

    Args:
        max_new_tokens: (B,) the longest translation allowed per row (the collapsed output is cut to it).
        alignments: if given, filled with one :class:`Alignment` per sentence.
    """
    if not isinstance(model, CTC):
        raise ValueError("strategy ctc: needs a CTC checkpoint (aiayn train --task ctc)")
    cfg = model.config
    inputs = model.upsampled(src_ids)  # (B, U)
    scores = model(src_ids, inputs).float().log_softmax(dim=-1)  # (B, U, V)
    scores = forbid(scores, cfg, no_eos=True)  # PAD, BOS, EOS never emitted; the blank (<mask>'s id) is
    best, paths = scores.max(dim=-1)  # (B, U) each
    lengths = padding_mask(inputs, cfg.pad_id).sum(dim=1).tolist()  # (B,) real positions per row
    outputs = []
    for row, n in enumerate(lengths):
        path = paths[row, :n].tolist()
        out = collapse(path, cfg.blank_id)
        outputs.append(out if max_new_tokens is None else out[: int(max_new_tokens[row])])
        if alignments is not None:
            alignments.append(Alignment(path, best[row, :n].exp().tolist(), kept_positions(path, cfg.blank_id),
                                        cfg.blank_id))
    return outputs
