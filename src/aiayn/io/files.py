"""Writing files and folders safely: atomic (a temp beside the target, then one rename), following the umask,
and never over a path the user owns (the rule every command that writes follows). Reading JSON with errors
that name the file. No torch here."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


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


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file, read in pieces (hex)."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
