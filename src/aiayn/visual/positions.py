"""Positions as pictures: the sinusoidal encodings of section 3.5 (the matrix, and how positions relate by offset),
and T5's relative position biases (buckets, the table, the bias on the logits)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from aiayn.model.positions import RelativePositionBias, relative_buckets, sinusoidal_encoding
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


def relative_bias_table(checkpoint: str | Path | None, buckets: int, max_distance: int, heads: int,
                        seed: int = 0) -> tuple[RelativePositionBias, RelativePositionBias, str]:
    """The encoder's and decoder's T5 bias tables: a checkpoint's trained ones (its config gives their sizes), or
    random ones (N(0, 1), seeded) of the sizes asked; and a title naming which."""
    if checkpoint is not None:
        from aiayn.inference.load import load_checkpoint

        model, _ = load_checkpoint(checkpoint)
        if model.config.positions != "relative" or model.config.arch != "encoder-decoder":
            raise ValueError(f"{checkpoint}: positions {model.config.positions}, {model.config.arch}; --kind relative "
                             "draws an encoder-decoder's relative position biases (a T5)")
        return model.encoder.position_bias, model.decoder.position_bias, f"trained ({Path(checkpoint).name})"
    torch.manual_seed(seed)
    tables = [RelativePositionBias(heads, buckets, max_distance, bidirectional) for bidirectional in (True, False)]
    for table in tables:
        torch.nn.init.normal_(table.table.weight)
    return tables[0], tables[1], "random N(0, 1)"


def plot_relative(length: int, output: str | Path, checkpoint: str | Path | None = None, buckets: int = 32,
                  max_distance: int = 128, heads: int = 8) -> Path:
    """T5's relative positions (Raffel et al. 2020) in three panels: the bucket of each key offset (bidirectional
    in the encoder, causal in the decoder), the table of one scalar per bucket and head, and what the first head
    adds to the encoder's attention logits for ``length`` tokens (it depends on key - query only)."""
    if length < 2 or buckets < 4 or buckets % 2 or max_distance <= buckets // 2 or heads < 1:
        raise ValueError("--length at least 2, --buckets even and at least 4, --max-distance above half of it")
    encoder, decoder, origin = relative_bias_table(checkpoint, buckets, max_distance, heads)
    plt = pyplot()
    offsets = torch.arange(-2 * encoder.max_distance, 2 * encoder.max_distance + 1)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5), layout="constrained")
    for table, name in ((encoder, "encoder (bidirectional)"), (decoder, "decoder (causal)")):
        axes[0].step(offsets.numpy(), relative_buckets(offsets, table.bidirectional, table.n_buckets,
                                                       table.max_distance).numpy(), where="mid", label=name)
    axes[0].set(title="bucket of each offset: exact near, logarithmic far", xlabel="key position - query position",
                ylabel="bucket")
    axes[0].legend()
    axes[0].grid(alpha=0.3)
    with torch.no_grad():
        weights = encoder.table.weight.detach().float()  # (buckets, H)
        bias = encoder(length, length)[0, 0].float()  # (L, L): head 0
    image = axes[1].imshow(weights.T.numpy(), cmap="RdBu", aspect="auto", interpolation="nearest")
    axes[1].set(title=f"encoder bias table, {origin}", xlabel="bucket", ylabel="head")
    fig.colorbar(image, ax=axes[1])
    image = axes[2].imshow(bias.numpy(), cmap="RdBu", aspect="auto", interpolation="nearest")
    axes[2].set(title="head 0's bias on the logits: depends on key - query only", xlabel="key position",
                ylabel="query position")
    fig.colorbar(image, ax=axes[2])
    return save_figure(fig, output)
