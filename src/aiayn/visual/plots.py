"""Training curves: loss, learning rate and validation BLEU against steps and minutes (matplotlib)."""

from __future__ import annotations

from pathlib import Path


def split_records(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """Training records and validation records of a run's metrics."""
    return [r for r in records if "loss" in r], [r for r in records if "valid_loss" in r]


def plot_run(records: list[dict], output: Path, title: str) -> list[Path]:
    """Draw a 2x3 grid (loss, lr, validation BLEU or loss; against steps and minutes) to one PNG."""
    from aiayn.visual.figures import pyplot, save_figure

    plt = pyplot()
    train, valid = split_records(records)
    metric = "valid_bleu" if any("valid_bleu" in r for r in valid) else "valid_loss"
    panels = [("loss", train, "training loss"), ("lr", train, "learning rate"), (metric, valid, metric)]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    for col, (key, rows, title) in enumerate(panels):
        rows = [r for r in rows if key in r]
        for row, x_key, x_label in ((0, "step", "step"), (1, "time_min", "training minutes")):
            ax = axes[row][col]
            ax.plot([r[x_key] for r in rows], [r[key] for r in rows], marker="o" if key == metric else None)
            ax.set(title=title, xlabel=x_label)
            ax.grid(alpha=0.3)
    fig.suptitle(f"aiayn run: {title}")
    return [save_figure(fig, output)]
