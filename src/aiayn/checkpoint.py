"""Folders written atomically, and model weights in safetensors (never pickle)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from safetensors.torch import load_model, save_model
from torch import nn


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success it replaces ``path`` by rename.

    A crash (or kill) before the end leaves any previous ``path`` whole, plus at most a stray
    ``.tmp`` folder that the next write ignores.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_weights(model: nn.Module, folder: Path) -> None:
    """Write ``model.safetensors`` (tied weights stored once)."""
    save_model(model, str(folder / "model.safetensors"))


def load_weights(model: nn.Module, folder: Path) -> None:
    """Read ``model.safetensors`` into ``model``; every tensor must match by name and shape."""
    file = folder / "model.safetensors"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no weights file; is {folder} a checkpoint folder?")
    try:
        load_model(model, str(file), strict=True)
    except RuntimeError as err:
        raise ValueError(f"{file}: weights do not match config.json: {str(err).splitlines()[0]}") from None
