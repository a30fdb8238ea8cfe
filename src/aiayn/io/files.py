"""Writing files and folders safely: atomic (a temp beside the target, then one rename), following the umask,
and never over a path the user owns (the rule every command that writes follows). Reading JSON with errors
that name the file. No torch here."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARKER = ".aiayn.json"  # in every folder aiayn writes whole: which command wrote it


def cache_dir() -> Path:
    """Where aiayn keeps what it fetches or builds once per machine (downloads, compiled decoding steps):
    $AIAYN_CACHE, else ~/.cache/aiayn."""
    return Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn"))


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path`` (same suffix); on success it replaces ``path`` by rename, on
    failure it is removed. Readers never see a half-written file; the file's mode follows the umask."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 (and so do some writers of their own)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path: str | Path, by: str, overwrite: bool = False, own_files: tuple[str, ...] = (),
                     marker: bool = True) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success it replaces ``path`` by rename.

    ``path`` is first checked by :func:`claim_output` (a folder the user owns is refused unless
    ``overwrite``); the new folder carries the marker of ``by`` (the command writing it; ``marker=False``
    where one of ``own_files`` already tells) and its mode follows the umask. A crash (or kill) before the end
    leaves any previous ``path`` whole (or, killed between the two renames, as ``.NAME.old``), plus a stray
    ``.NAME.*.tmp`` folder: :func:`recover` cleans both up.
    """
    path = claim_output(path, by, overwrite=overwrite, own_files=own_files)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        if marker:
            mark(tmp, by)
        yield tmp
        _follow_umask(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


class OutputError(ValueError):
    """An output path that is not ours to write: refused, nothing touched."""


def mark(folder: str | Path, by: str) -> None:
    """Record in ``folder`` that aiayn's command ``by`` wrote it (what :func:`claim_output` recognises)."""
    atomic_write_text(Path(folder) / MARKER, json.dumps({"written_by": f"aiayn {by}"}) + "\n")


def written_by(folder: str | Path) -> str | None:
    """The command whose marker ``folder`` carries (``"aiayn export"``), or None."""
    try:
        data = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("written_by") if isinstance(data, dict) else None


def claim_output(path: str | Path, by: str, folder: bool = True, overwrite: bool = False,
                 own_files: tuple[str, ...] = ()) -> Path:
    """The rule for every path a command writes: what the user owns is never replaced.

    Nothing there, or an empty folder: ours to write. A folder that ``by`` wrote before (its marker, or one of
    ``own_files``: a checkpoint's ``checksums.json``, a run's ``metrics.jsonl``): ours to replace. Anything
    else is an :class:`OutputError` naming the path and ``--overwrite`` (which allows it), and a file where a
    folder goes (or a folder where a file goes) is one whatever ``overwrite`` says.
    """
    path = Path(path)
    kind = "folder" if folder else "file"
    if not os.path.lexists(path):
        return path
    if folder != path.is_dir():
        there = "a folder" if path.is_dir() else "a file"
        raise OutputError(f"{path}: {there} is in the way of the {kind} aiayn {by} writes; move it or choose "
                          f"another path")
    if overwrite or (folder and _ours(path, by, own_files)):
        return path
    raise OutputError(f"{path}: exists and was not written by aiayn {by}; choose another path, or pass "
                      f"--overwrite to replace it")


def _ours(folder: Path, by: str, own_files: tuple[str, ...]) -> bool:
    """Nothing in it but a marker, ``by``'s marker, or one of ``by``'s own files."""
    return (all(p.name == MARKER for p in folder.iterdir()) or written_by(folder) == f"aiayn {by}"
            or any((folder / name).exists() for name in own_files))


def output_folder(path: str | Path, by: str, overwrite: bool = False, own_files: tuple[str, ...] = ()) -> Path:
    """A folder that ``by`` fills over time (a run, shards, a distilled corpus): claimed by
    :func:`claim_output`, created, and marked as ``by``'s."""
    path = claim_output(path, by, overwrite=overwrite, own_files=own_files)
    path.mkdir(parents=True, exist_ok=True)
    if written_by(path) is None:
        mark(path, by)
    return path


def _follow_umask(folder: Path) -> None:
    """Give ``folder`` and everything in it the modes the umask gives new files and folders (mkdtemp makes
    0700, and safetensors writes 0600)."""
    mask = _umask()
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


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


def give_back_memory() -> None:
    """Hand the C heap's freed pages back to the system (glibc's ``malloc_trim``; elsewhere nothing): freed
    tensors of a few megabytes stay in the heap otherwise, and a model converted layer by layer as it is read
    would keep every layer's float32 weights' worth of resident memory."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
STEADY_MMAP, STEADY_TRIM = 32 * 2**20, 64 * 2**20  # the thresholds glibc's own adjustment reaches (64-bit)


@contextlib.contextmanager
def memory_returned_at_once() -> Iterator[None]:
    """Inside, glibc serves blocks over 128 KiB from pages of their own and hands them back when freed (its mmap
    threshold held at the default): a model quantized as it is read makes many freed temporaries of a few
    megabytes, which glibc's adjusted threshold keeps in the heap, a peak of up to 200 MB more (SmolLM2 int4,
    one run to the next). After, the thresholds glibc's adjustment reaches by itself. Elsewhere: nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        set_option = libc.mallopt
    except (OSError, AttributeError):
        yield
        return
    set_option(M_MMAP_THRESHOLD, 128 * 2**10)
    try:
        yield
    finally:
        set_option(M_MMAP_THRESHOLD, STEADY_MMAP)
        set_option(M_TRIM_THRESHOLD, STEADY_TRIM)
        give_back_memory()
