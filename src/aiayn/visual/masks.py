"""The mask matrices of section 3.2.3 as the tutorials draw them: rows are queries, columns are keys, 1 = may
attend (aiayn's one convention: bool, True = may attend). Built by ``aiayn.model.masks``, never redrawn by hand."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from aiayn.model.masks import causal_mask, decoder_self_mask, key_mask, padding_mask
from aiayn.visual.figures import pyplot, save_figure

KINDS = ("causal", "padding", "cross")
PAD, WORD = 0, 5  # a padding id and an ordinary one


def mask_matrix(kind: str, length: int, pad: int = 0, src_length: int | None = None) -> Tensor:
    """The (queries, keys) bool matrix of ``kind``.

    causal: decoder self-attention over ``length`` tokens (the last ``pad`` of them padding, if any);
    padding: encoder self-attention over ``length`` tokens whose last ``pad`` are padding;
    cross: ``length`` decoder queries over ``src_length`` source keys, the last ``pad`` of them padding.
    """
    if kind not in KINDS:
        raise ValueError(f"--kind: {kind!r} is not one of {', '.join(KINDS)}")
    keys = src_length if kind == "cross" and src_length is not None else length
    if length < 1 or keys < 1 or not 0 <= pad < keys:
        raise ValueError("--length, --src-length and --pad: lengths must be at least 1 and --pad below the keys")
    ids = torch.tensor([[WORD] * (keys - pad) + [PAD] * pad])  # (1, keys)
    if kind == "causal":
        if not pad:
            return causal_mask(length)  # (T, T)
        return decoder_self_mask(padding_mask(ids, PAD), length, length, ids.device)[0, 0]  # (T, T)
    return key_mask(padding_mask(ids, PAD))[0, 0].expand(length, keys)  # (T, S): a padded key is never seen


def format_mask(mask: Tensor, kind: str) -> str:
    """The matrix as text: a header, key labels across, one row per query, 1 / 0 entries."""
    rows, cols = mask.shape
    width = max(len(f"k{cols - 1}"), 2)
    head = f"{kind} mask, {rows} x {cols} (rows: queries q, columns: keys k; 1 = may attend, 0 = masked)\n"
    lines = [" " * (width + 1) + " ".join(f"k{j}".rjust(width) for j in range(cols))]
    lines += [f"q{i}".rjust(width) + " " + " ".join(str(int(x)).rjust(width) for x in mask[i].tolist())
              for i in range(rows)]
    return head + "\n".join(lines) + "\n"


def plot_mask(mask: Tensor, kind: str, output: str | Path) -> Path:
    """The matrix as a picture: dark = may attend, light = masked, each cell labelled 1 or 0."""
    plt = pyplot()
    rows, cols = mask.shape
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * cols, 1.0 + 0.45 * rows), layout="constrained")
    ax.imshow(mask.float().numpy(), cmap="Blues", vmin=-0.3, vmax=1.2)
    for i in range(rows):
        for j in range(cols):
            ax.text(j, i, str(int(mask[i, j])), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(cols), [f"k{j}" for j in range(cols)], fontsize=7)
    ax.set_yticks(range(rows), [f"q{i}" for i in range(rows)], fontsize=7)
    ax.set_title(f"{kind} mask (1 = may attend)", fontsize=9)
    return save_figure(fig, output)
