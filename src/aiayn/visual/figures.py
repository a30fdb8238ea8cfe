"""matplotlib without a screen, and figures written atomically (temp file, then rename)."""

from __future__ import annotations

from pathlib import Path

from aiayn.io.files import atomic_path

FORMATS = (".png", ".svg", ".pdf")


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_output(path: str | Path) -> Path:
    """The output path, or ValueError when its suffix is not a picture format matplotlib writes."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"--output: {path} should end in {', '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise ValueError(f"--output: folder {path.parent} does not exist")
    return path


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) through a temp file, close it, return the path."""
    path = check_output(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi)
    finally:
        pyplot().close(fig)
    return path
