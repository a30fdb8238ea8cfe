"""Attention weights of one sentence pair, per layer and head, and their grid of heatmaps (section 3.2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from aiayn.inference.translator import Translator
from aiayn.visual.figures import pyplot, save_figure

KINDS = ("encoder", "decoder_self", "cross")
TITLES = {"encoder": "encoder self-attention", "decoder_self": "decoder self-attention (masked)",
          "cross": "encoder-decoder (cross) attention"}


@dataclass
class AttentionMaps:
    """Weights for one pair. ``weights[kind]``: (L, H, rows, cols); rows attend to cols.

    encoder: source x source; decoder_self: target input x target input; cross: target input x source.
    The target input is ``<s>`` followed by the target's pieces (what the decoder reads).
    """

    source_tokens: list[str]
    target_tokens: list[str]
    translation: str
    weights: dict[str, Tensor]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of ``kind``'s matrices."""
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        return self.target_tokens, self.target_tokens if kind == "decoder_self" else self.source_tokens

    def to_dict(self, digits: int = 4) -> dict:
        """JSON-ready: tokens and weights as nested lists [layer][head][row][col]."""
        return {"source_tokens": self.source_tokens, "target_tokens": self.target_tokens,
                "translation": self.translation,
                "attention": {k: w.round(decimals=digits).tolist() for k, w in self.weights.items()}}


@torch.no_grad()
def attention_for(translator: Translator, source: str, target: str | None = None) -> AttentionMaps:
    """Attention of the translator's model on ``source`` and ``target`` (its own translation if None)."""
    model, tok = translator.model, translator.tokenizers
    cfg = model.config
    src_ids = translator.source_ids(source)
    if not src_ids:
        raise ValueError("sentence: empty; give a sentence to draw the attention of")
    translation = translator.translate([source])[0] if target is None else target
    tgt_ids = tok.tgt.encode(" ".join(translation.split()))[: cfg.max_len - 1]
    src = torch.tensor([src_ids], device=translator.device)  # (1, S)
    tgt_in = torch.tensor([[cfg.bos_id, *tgt_ids]], device=translator.device)  # (1, T)
    maps = model.eval().attention_maps(src, tgt_in)  # kind -> L x (1, H, rows, cols)
    weights = {kind: torch.stack([w[0] for w in maps[kind]]).float().cpu() for kind in KINDS}  # (L, H, r, c)
    return AttentionMaps(tok.src.pieces(src_ids), ["<s>", *tok.tgt.pieces(tgt_ids)], translation, weights)


@torch.no_grad()
def lm_attention_for(model, tokenizer, text: str | list[int]) -> AttentionMaps:
    """Causal self-attention of a decoder-only ``model`` over ``text`` (a prompt and its continuation, or its ids):
    only ``decoder_self`` (L, H, T, T); the tokens are the rows and the columns."""
    ids = (tokenizer.encode(text) if isinstance(text, str) else text)[-model.config.max_len:]
    if not ids:
        raise ValueError("text: empty; give the text to draw the attention of")
    maps = model.eval().attention_maps(torch.tensor([ids], device=next(model.parameters()).device))  # (1, T)
    weights = {"decoder_self": torch.stack([w[0] for w in maps["decoder_self"]]).float().cpu()}  # (L, H, T, T)
    return AttentionMaps([], tokenizer.pieces(ids), text if isinstance(text, str) else tokenizer.decode(ids), weights)


def _heatmap(ax, matrix: Tensor, rows: list[str], cols: list[str], left: bool, bottom: bool) -> object:
    image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols if bottom else [], rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows if left else [], fontsize=7)
    return image


def plot_attention(maps: AttentionMaps, output: str | Path, kinds: tuple[str, ...] = KINDS) -> Path:
    """One figure: for each kind a grid of heatmaps, layers (rows) x heads (columns), tokens on the axes."""
    plt = pyplot()
    n_layers, n_heads = (maps.weights[kinds[0]].shape[i] for i in (0, 1))
    cell = 0.9 + 0.16 * max(len(maps.source_tokens), len(maps.target_tokens))
    fig = plt.figure(figsize=(1.2 + cell * n_heads, len(kinds) * (0.8 + cell * n_layers)), layout="constrained")
    subfigs = fig.subfigures(len(kinds), 1, squeeze=False)[:, 0]
    for subfig, kind in zip(subfigs, kinds, strict=True):
        rows, cols = maps.axes(kind)
        axes = subfig.subplots(n_layers, n_heads, squeeze=False)
        for layer in range(n_layers):
            for head in range(n_heads):
                ax = axes[layer][head]
                image = _heatmap(ax, maps.weights[kind][layer, head], rows, cols, head == 0,
                                 layer == n_layers - 1)
                ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
        subfig.suptitle(TITLES[kind])
        subfig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return save_figure(fig, output)
