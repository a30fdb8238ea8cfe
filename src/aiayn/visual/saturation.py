"""Why divide by sqrt(d_k) (section 3.2.1): without it the scores grow with the head size and the softmax
saturates. Measured on trained models: the share of attention rows whose largest weight exceeds 0.99, per layer
(``aiayn show saturation``, docs/experiments.md)."""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.model.transformer import EncoderDecoder
from aiayn.visual.figures import pyplot, save_figure

KINDS = ("encoder", "decoder_self", "cross")


@torch.no_grad()
def saturation(model: EncoderDecoder, pairs: list[tuple[list[int], list[int]]],
               threshold: float = 0.99) -> dict[str, list[float]]:
    """Per kind of attention, per layer: the share of rows (one query of one head of one sentence, teacher-forced
    on ``pairs`` of source ids and target ids without ``<s>``) whose largest weight exceeds ``threshold``."""
    counts: dict[str, list[list[int]]] = {}
    for src, tgt in pairs:  # one sentence at a time: every row is a real one
        maps = model.eval().attention_maps(torch.tensor([src]), torch.tensor([[model.config.bos_id, *tgt]]))
        for kind in KINDS:
            per_layer = counts.setdefault(kind, [[0, 0] for _ in maps[kind]])
            for layer, weights in enumerate(maps[kind]):  # (1, H, T, S)
                peak = weights.amax(dim=-1)  # (1, H, T)
                per_layer[layer][0] += int((peak > threshold).sum())
                per_layer[layer][1] += peak.numel()
    return {kind: [hits / max(total, 1) for hits, total in layers] for kind, layers in counts.items()}


def plot_saturation(found: dict[str, dict[str, list[float]]], output: str | Path, threshold: float = 0.99) -> Path:
    """One panel per kind of attention: per layer, one bar per model (name -> :func:`saturation`)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(KINDS), figsize=(15, 4), layout="constrained", sharey=True)
    width = 0.8 / max(len(found), 1)
    for ax, kind in zip(axes, KINDS, strict=True):
        for i, (name, shares) in enumerate(found.items()):
            layers = range(len(shares[kind]))
            ax.bar([x + i * width for x in layers], shares[kind], width, label=name)
        n_layers = max(len(shares[kind]) for shares in found.values())
        ax.set_xticks([x + 0.4 - width / 2 for x in range(n_layers)], [str(x + 1) for x in range(n_layers)])
        ax.set(title=kind.replace("_", " "), xlabel="layer", ylim=(0, 1))
    axes[0].set(ylabel=f"rows with a weight > {threshold}")
    axes[-1].legend()
    return save_figure(fig, output)
