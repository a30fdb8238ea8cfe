"""The checkpoint layer: what a checkpoint folder is, writing any file or folder atomically, resolving a
run folder to its checkpoint, and reading weights back (safetensors + JSON; never pickle).

A checkpoint folder holds ``config.json`` (the ModelConfig), ``model.safetensors`` (the weights), the
tokenizer model(s) when it has them, and, for resuming training, ``trainer.json`` + ``trainer.safetensors``.
Every folder ends with ``checksums.json`` (the SHA-256 of each file), checked when the model loads: a file
damaged or edited after saving is an error naming it. A run folder holds ``best/`` and ``last/``
checkpoints, ``checkpoints/step_N/`` and ``metrics.jsonl``.
This module imports no torch at load time (the command line reads it before deciding to).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

CONFIG, WEIGHTS, CHECKSUMS = "config.json", "model.safetensors", "checksums.json"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path`` (same suffix); on success it replaces ``path`` by rename, on
    failure it is removed. Readers never see a half-written file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success it replaces ``path`` by rename.

    A crash (or kill) before the end leaves any previous ``path`` whole (or, killed between the two
    renames, as ``.NAME.old``), plus a stray ``.NAME.*.tmp`` folder: :func:`recover` cleans both up.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def recover(folder: str | Path) -> list[Path]:
    """Undo what a killed :func:`atomic_directory` left in ``folder``: restore a ``.NAME.old`` whose
    ``NAME`` is missing, delete stray ``.*.tmp`` folders and files. Returns what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    for old in folder.glob(".*.old"):
        target = folder / old.name[1:-len(".old")]
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(target)
    removed = sorted(p for p in folder.glob(".*.tmp*") if ".tmp" in p.name)
    for stray in removed:
        shutil.rmtree(stray, ignore_errors=True) if stray.is_dir() else stray.unlink(missing_ok=True)
    return removed


def is_checkpoint(folder: str | Path) -> bool:
    return (Path(folder) / CONFIG).is_file()


def resolve_checkpoint(path: str | Path) -> Path:
    """A run folder means its ``best/`` (else ``last/``); a checkpoint folder means itself."""
    path = Path(path)
    if is_checkpoint(path):
        return path
    for name in ("best", "last"):
        if is_checkpoint(path / name):
            return path / name
    raise FileNotFoundError(f"{path}: neither a checkpoint folder (config.json) nor a run folder with best/ or last/")


def write_checkpoint(folder: str | Path, model: nn.Module, tokenizers=None,
                     write_extra: Callable[[Path], None] | None = None) -> None:
    """Write a checkpoint folder atomically: config, weights, the tokenizers if given, and whatever
    ``write_extra(temp_folder)`` adds (the trainer's state)."""
    with atomic_directory(folder) as tmp:
        model.config.save(tmp / CONFIG)
        save_weights(model, tmp)
        if tokenizers is not None:
            tokenizers.save(tmp)
        if write_extra is not None:
            write_extra(tmp)
        atomic_write_text(tmp / CHECKSUMS, json.dumps(_digests(tmp), indent=1) + "\n")


def _digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (but the checksum file), by relative POSIX path."""
    digests = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS):
        digests[file.relative_to(folder).as_posix()] = sha256_file(file)
    return digests


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file, read in pieces (hex)."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_checkpoint(folder: str | Path) -> None:
    """Check every file against the folder's ``checksums.json`` (folders written before checksums existed
    have none and pass). A missing or changed file is a ValueError naming it."""
    folder = Path(folder)
    if not (folder / CHECKSUMS).is_file():
        return
    expected = read_json(folder / CHECKSUMS)
    for name, digest in expected.items():
        file = folder / name
        if not file.is_file():
            raise ValueError(f"{file}: missing from the checkpoint (listed in {CHECKSUMS}); copy the folder again")
        if sha256_file(file) != digest:
            raise ValueError(f"{file}: checksum mismatch: damaged or edited after it was saved; restore it "
                             "or use another checkpoint")


def read_json(path: str | Path) -> dict:
    """A JSON object from ``path``; a missing, damaged or non-object file is a ValueError naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: damaged, not valid JSON ({err}); restore it or train again") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def save_weights(model: nn.Module, folder: Path) -> None:
    """Write ``model.safetensors`` (tied weights stored once)."""
    from safetensors.torch import save_model

    save_model(model, str(folder / WEIGHTS))


def load_weights(model: nn.Module, folder: Path) -> None:
    """Read ``model.safetensors`` into ``model``; every tensor must match by name and shape."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    file = folder / WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no weights file; is {folder} a checkpoint folder?")
    try:
        load_model(model, str(file), strict=True)
    except SafetensorError as err:
        raise ValueError(f"{file}: damaged or truncated weights file ({err}); copy it again") from None
    except RuntimeError as err:
        raise ValueError(f"{file}: weights do not match config.json: {str(err).splitlines()[0]}") from None
