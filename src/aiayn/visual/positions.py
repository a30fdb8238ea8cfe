"""The sinusoidal encodings of section 3.5 as pictures: the matrix, and how positions relate by offset."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from aiayn.model.positions import sinusoidal_encoding
from aiayn.visual.figures import pyplot, save_figure


def position_similarity(length: int, d_model: int) -> Tensor:
    """(length, length) dot products PE(p) . PE(q).

    Each sin/cos pair contributes cos(w_i (p - q)), so the matrix depends on the offset p - q only
    (a Toeplitz matrix): the property that lets attention find relative positions.
    """
    pe = sinusoidal_encoding(length, d_model, dtype=torch.float64)  # (L, D)
    return pe @ pe.T  # (L, L)


def plot_positions(d_model: int, length: int, output: str | Path) -> Path:
    """Three panels: PE as positions x dimensions; PE(p) . PE(q) for all pairs; the row of p = length // 2."""
    if d_model < 2 or length < 2:
        raise ValueError("--d-model and --length: must both be at least 2")
    plt = pyplot()
    pe, sim = sinusoidal_encoding(length, d_model), position_similarity(length, d_model)
    p = length // 2
    fig, axes = plt.subplots(1, 3, figsize=(17, 5), layout="constrained")
    image = axes[0].imshow(pe.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    axes[0].set(title=f"sinusoidal encoding PE ({length} x {d_model})", xlabel="dimension i", ylabel="position")
    fig.colorbar(image, ax=axes[0])
    image = axes[1].imshow(sim.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    axes[1].set(title="PE(p) . PE(q): depends on p - q only", xlabel="position q", ylabel="position p")
    fig.colorbar(image, ax=axes[1])
    axes[2].plot(range(length), sim[p].numpy())
    axes[2].axvline(p, color="grey", linestyle=":")
    axes[2].set(title=f"PE({p}) . PE(q)", xlabel="position q", ylabel="dot product")
    axes[2].grid(alpha=0.3)
    return save_figure(fig, output)
