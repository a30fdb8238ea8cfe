"""Non-autoregressive decoding seen from inside (``aiayn show refinement``, and the web page for a CMLM
checkpoint): Mask-Predict's iterations (each one's tokens, their probabilities, the positions it predicted), or a
CTC model's one pass (what each upsampled position emits, its probability, what the collapse keeps)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from aiayn.decoding.ctc import Alignment, best_path
from aiayn.decoding.mask_predict import Iteration, mask_predict
from aiayn.visual.figures import pyplot, save_figure


@dataclass
class Refinement:
    """One sentence's Mask-Predict: the source pieces, then per iteration the target pieces, each piece's
    probability and whether the iteration predicted it (the first predicts all; later ones the re-masked)."""

    source_tokens: list[str]
    steps: list[dict]
    translation: str
    inputs: list[str] | None = None  # a CTC model's: the decoder's inputs (the source pieces, upsampled)

    def to_dict(self) -> dict:
        found = {"source_tokens": self.source_tokens, "steps": self.steps, "translation": self.translation}
        return found if self.inputs is None else {**found, "inputs": self.inputs}


@torch.no_grad()
def refinement_for(translator, sentence: str, iterations: int | None = None,
                   length_beam: int | None = None) -> Refinement:
    """Mask-Predict on ``sentence`` with the translator's CMLM (its decoding defaults unless given)."""
    ids = translator.source_ids(sentence)
    if not ids:
        raise ValueError("sentence: empty; give a sentence to refine")
    decoding = translator.decoding.replace(**{k: v for k, v in (("iterations", iterations),
                                                                ("length_beam", length_beam)) if v is not None})
    history: list[list[Iteration]] = []
    (out,) = mask_predict(translator.model, torch.tensor([ids], device=translator.device), decoding.iterations,
                          decoding.length_beam, history=history)
    tgt = translator.tokenizers.tgt
    steps = [{"tokens": tgt.pieces(it.tokens), "probabilities": [round(p, 4) for p in it.probabilities],
              "predicted": it.predicted} for it in history[0]]
    return Refinement(translator.tokenizers.src.pieces(ids), steps, tgt.decode(out))


BLANK = "ε"  # how a CTC blank is shown


@torch.no_grad()
def alignment_for(translator, sentence: str) -> Refinement:
    """A CTC model's best path on ``sentence``: one step whose tokens are what each upsampled position emits
    (:data:`BLANK` for the blank) and whose ``predicted`` marks the positions the collapse keeps."""
    ids = translator.source_ids(sentence)
    if not ids:
        raise ValueError("sentence: empty; give a sentence to translate")
    found: list[Alignment] = []
    (out,) = best_path(translator.model, torch.tensor([ids], device=translator.device), alignments=found)
    path, tgt, src = found[0], translator.tokenizers.tgt, translator.tokenizers.src
    emitted = [BLANK if t == path.blank else piece for t, piece in zip(path.emitted, tgt.pieces(path.emitted),
                                                                         strict=True)]
    steps = [{"tokens": emitted, "probabilities": [round(p, 4) for p in path.probabilities], "predicted": path.kept}]
    pieces = src.pieces(ids)
    inputs = [piece for piece in pieces for _ in range(translator.model.config.ctc_upsample)]
    return Refinement(pieces, steps, tgt.decode(out), inputs)


def format_refinement(refinement: Refinement) -> str:
    """A text table: one line per iteration (a CTC model: its one pass, after the line of its inputs); a
    predicted token (a CTC model: one the collapse keeps) is marked ``*`` with its probability."""
    lines = [f"source: {' '.join(refinement.source_tokens)}"]
    if refinement.inputs is not None:
        lines.append("inputs: " + " ".join(refinement.inputs))
    for t, step in enumerate(refinement.steps, start=1):
        cells = [f"{'*' if new else ' '}{tok}({p:.2f})" for tok, p, new in
                 zip(step["tokens"], step["probabilities"], step["predicted"], strict=True)]
        lines.append(("best path: " if refinement.inputs is not None else f"iteration {t}: ") + " ".join(cells))
    lines.append(f"translation: {refinement.translation}")
    return "\n".join(lines) + "\n"


def plot_refinement(refinement: Refinement, output: str | Path) -> Path:
    """One row per iteration, one column per target position: the token written in its cell, the cell's colour
    its probability; positions the iteration predicted are framed (a CTC model: one row, a column per upsampled
    position, the kept ones framed)."""
    plt = pyplot()
    rows, cols = len(refinement.steps), len(refinement.steps[0]["tokens"])
    probs = [[p for p in step["probabilities"]] for step in refinement.steps]  # (iterations, L)
    height = 1.0 + 0.55 * rows if refinement.inputs is None else 2.4  # a CTC pass: one row, its inputs below
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * cols, height), layout="constrained")
    image = ax.imshow(probs, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for r, step in enumerate(refinement.steps):
        for c, (tok, p, new) in enumerate(zip(step["tokens"], step["probabilities"], step["predicted"], strict=True)):
            ax.text(c, r, tok, ha="center", va="center", fontsize=8, color="white" if p < 0.6 else "black")
            if new:
                ax.add_patch(plt.Rectangle((c - 0.42, r - 0.42), 0.84, 0.84, fill=False, edgecolor="red",
                                           linewidth=2))  # inset: neighbours' frames stay apart
    if refinement.inputs is None:
        ax.set_yticks(range(rows), [f"iteration {t}" for t in range(1, rows + 1)], fontsize=8)
        ax.set_xticks(range(cols), [str(c + 1) for c in range(cols)], fontsize=7)
        ax.set_xlabel("target position (red frame: predicted at this iteration)")
        ax.set_title(f"Mask-Predict: {refinement.translation}", fontsize=9)
    else:  # a CTC model: the upsampled positions under the inputs they read
        ax.set_yticks([0], ["emits"], fontsize=8)
        ax.set_xticks(range(cols), refinement.inputs, fontsize=7, rotation=60)
        ax.set_xlabel(f"upsampled position: the source piece it reads (red frame: kept by the collapse; {BLANK}: "
                      "blank)")
        ax.set_title(f"CTC, one pass: {refinement.translation}", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8, label="probability")
    return save_figure(fig, output)
