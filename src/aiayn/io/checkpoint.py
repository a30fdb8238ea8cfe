"""The checkpoint folder: what it is, writing it atomically, and reading weights back (safetensors + JSON;
never pickle).

A checkpoint folder holds ``config.json`` (the ModelConfig), ``model.safetensors`` (the weights), the
tokenizer model(s) when it has them, and, for resuming training, ``trainer.json`` + ``trainer.safetensors``.
Every folder ends with ``checksums.json`` (the SHA-256 of each file), checked when the model loads: a file
damaged or edited after saving is an error naming it. A run folder of checkpoints: ``aiayn.io.run``.
This module imports no torch at load time (the command line reads it before deciding to).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.io.files import (
    atomic_directory,
    atomic_write_text,
    give_back_memory,
    memory_returned_at_once,
    read_json,
    sha256_file,
)
from aiayn.io.rows import SLICE_BYTES, StoredRows, defer_rows, read_deferred

if TYPE_CHECKING:
    import torch
    from torch import nn

CONFIG, WEIGHTS, CHECKSUMS = "config.json", "model.safetensors", "checksums.json"
GENERATION = "generation.json"  # the decoding defaults (aiayn.decoding.config.DecodingConfig), when the run chose them
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # a LoRA run's (PEFT's format)


@dataclass(frozen=True)
class Converter:
    """How an inference copy is made part by part as the weights are read (``load_weights``; made by
    ``aiayn.inference.precision.converter``): ``convert(part)`` in place on each layer, then on the whole model.
    ``reads_rows``: its layers quantize a block of rows at a time, so large weights are handed to it unread (a
    :class:`RowSource`); ``dtype``: what the model's own parts are cast to (None: left as they are, so rows left
    unread stay so until read)."""

    convert: Callable[[nn.Module], object]
    reads_rows: bool = False
    dtype: torch.dtype | None = None

    def __call__(self, part: nn.Module) -> object:
        return self.convert(part)


def is_checkpoint(folder: str | Path) -> bool:
    return (Path(folder) / CONFIG).is_file()


def is_adapter(folder: str | Path) -> bool:
    """A LoRA run's checkpoint: an adapter folder (``aiayn.interop.peft``), used with its base model."""
    return (Path(folder) / ADAPTER_CONFIG).is_file() and not is_checkpoint(folder)


def write_checkpoint(folder: str | Path, model: nn.Module, tokenizers=None,
                     write_extra: Callable[[Path], None] | None = None, generation: dict | None = None,
                     by: str = "save", overwrite: bool = False,
                     write_model: Callable[[Path], None] | None = None) -> None:
    """Write a checkpoint folder atomically: config, weights, the tokenizers if given, the decoding defaults
    (``generation.json``) if given, and whatever ``write_extra(temp_folder)`` adds (the trainer's state); then
    the checksums of it all. ``write_model(temp_folder)`` writes the model instead of its config and weights (a
    LoRA run's adapter alone, ``training/state.py``).

    ``by`` names the command writing it: a folder that is neither empty nor a checkpoint is refused unless
    ``overwrite`` (``aiayn.io.files.claim_output``)."""
    with atomic_directory(folder, by, overwrite, own_files=(CHECKSUMS,), marker=False) as tmp:
        if write_model is not None:
            write_model(tmp)
        else:
            model.config.save(tmp / CONFIG)
            save_weights(model, tmp)
        if tokenizers is not None:
            tokenizers.save(tmp)
        if generation is not None:
            atomic_write_text(tmp / GENERATION, json.dumps(generation, indent=1) + "\n")
        if write_extra is not None:
            write_extra(tmp)
        atomic_write_text(tmp / CHECKSUMS, json.dumps(digests(tmp), indent=1) + "\n")


def digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (but the checksum file), by relative POSIX path."""
    digests = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS):
        digests[file.relative_to(folder).as_posix()] = sha256_file(file)
    return digests


_VERIFIED: set[tuple] = set()  # folders this process checked, with each file's size and modification time then


def verify_checkpoint(folder: str | Path) -> None:
    """Check every file against the folder's ``checksums.json`` (folders written before checksums existed
    have none and pass). A missing or changed file is a ValueError naming it. A folder this process checked
    already, every file the same size and modified at the same time since, is not read again (a server that
    loads a model again after unloading it: ``serve/models.py``); one modified within 2 s of the check is read
    every time."""
    folder = Path(folder)
    if not (folder / CHECKSUMS).is_file():
        return
    expected = read_json(folder / CHECKSUMS)
    for name in expected:
        if not (folder / name).is_file():
            raise ValueError(f"{folder / name}: missing from the checkpoint (listed in {CHECKSUMS}); copy the folder "
                             "again")
    seen = (str(folder.resolve()), *((name, (s := (folder / name).stat()).st_size, s.st_mtime_ns)
                                     for name in sorted(expected)))
    if seen in _VERIFIED:
        return
    for name, digest in expected.items():
        if sha256_file(folder / name) != digest:
            raise ValueError(f"{folder / name}: checksum mismatch: damaged or edited after it was saved; restore it "
                             "or use another checkpoint")
    if all(time.time_ns() - mtime > 2 * 10**9 for _, _, mtime in seen[1:]):  # a file written within the clock's
        _VERIFIED.add(seen)  # step of now could change again with the same time (git's "racy" files): not kept


def save_weights(model: nn.Module, folder: Path) -> None:
    """Write ``model.safetensors`` (tied weights stored once)."""
    from safetensors.torch import save_model

    save_model(model, str(folder / WEIGHTS))


def read_tensors(file: Path) -> dict:
    """Every tensor of a safetensors file by name; a damaged or truncated file is a ValueError naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except SafetensorError as err:
        raise ValueError(f"{file}: not a safetensors file, damaged or truncated ({err}); copy it again") from None


def load_weights(model: nn.Module, folder: Path, convert: Converter | None = None) -> None:
    """Read ``model.safetensors`` into ``model`` one tensor at a time (never a second copy of the whole model);
    every tensor must match by name and shape (a weight tied to another is stored once, under either name).
    ``convert(part)`` runs on each layer (``*.layers.N``) as soon as its weights are in, then on the whole model
    (an inference copy made as the weights come: ``aiayn.inference.precision.converter``), so that a layer's
    float32 weights are let go before the next one's are read. A converter that quantizes rows as they come
    (``convert.reads_rows``) is handed the model's large tensors outside the layers (a token table, an output
    projection) unread, as :class:`StoredRows`: their float32 values are never all held."""
    from safetensors import SafetensorError, safe_open

    file = folder / WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no weights file; is {folder} a checkpoint folder?")
    try:
        with safe_open(str(file), framework="pt") as stored:
            names = set(stored.keys())
        tied = _aliases(model)  # name -> every name of its tensor (tied weights: several)
        unknown = sorted(names - set(tied))
        missing = sorted({group[0] for group in tied.values() if not names & set(group)})
        if unknown or missing:
            raise ValueError(f"{file}: weights do not match config.json: "
                             + (f"missing {', '.join(missing[:3])}" if missing else f"unexpected {unknown[0]}"))
        read: set[str] = set()  # the names read so far (with their aliases)
        rows = convert is not None and convert.reads_rows
        with memory_returned_at_once() if convert is not None else contextlib.nullcontext():
            for prefix, part in converted_parts(model):
                with safe_open(str(file), framework="pt") as stored:  # mapped a part at a time: the file's pages
                    _read_part(part, prefix, stored, names, tied, read, file, rows and part is model)
                if convert is not None:
                    convert(part)
                    read_deferred(part)
                    give_back_memory()  # the part's float32 weights, let go: the next part's do not add up
    except SafetensorError as err:
        raise ValueError(f"{file}: damaged or truncated weights file ({err}); copy it again") from None


def converted_parts(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The parts an inference copy is converted by as its weights are read, (name, part): each layer
    (``*.layers.N``), then the whole model."""
    return [(n, m) for n, m in model.named_modules() if n.split(".")[-2:-1] == ["layers"]] + [("", model)]


def _aliases(model: nn.Module) -> dict[str, list[str]]:
    """Each name of ``model``'s parameters and persistent buffers -> every name of the same tensor."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return {name: group for group in groups.values() for name in group}


def _read_part(part: nn.Module, prefix: str, stored, names: set[str], tied: dict, read: set[str],
               file: Path, defer: bool = False) -> None:
    """Copy into ``part``'s tensors (``prefix``: its name in the model) not read yet their stored values; with
    ``defer``, a matrix over ``SLICE_BYTES`` is left unread, its rows a :class:`StoredRows` (:func:`defer_rows`)."""
    import torch

    with torch.no_grad():
        for local, tensor in part.state_dict(keep_vars=True).items():
            full = f"{prefix}.{local}" if prefix else local
            if full in read or full not in tied:  # read already (a tied weight), or made by ``convert`` meanwhile
                continue
            name = next(n for n in tied[full] if n in names)
            shape = tuple(stored.get_slice(name).get_shape())
            if shape != tuple(tensor.shape):
                raise ValueError(f"{file}: weights do not match config.json: {name} has shape "
                                 f"{shape}, the model {tuple(tensor.shape)}")
            large = tensor.dim() and tensor.numel() * tensor.element_size() > SLICE_BYTES
            if large and defer and tensor.dim() == 2:
                defer_rows(tensor, StoredRows(file, name, shape))
            elif large:
                _read_slices(tensor, name, file)
            else:
                tensor.copy_(stored.get_tensor(name))
            read.update(tied[full])


def _read_slices(tensor, name: str, file: Path) -> None:
    """Copy the stored tensor ``name`` into ``tensor`` about ``SLICE_BYTES`` of rows at a time, the file mapped anew
    for each slice: the pages read are let go slice by slice (an embedding's are not held beside it whole)."""
    from safetensors import safe_open

    rows = max(1, SLICE_BYTES * tensor.size(0) // (tensor.numel() * tensor.element_size()))
    for start in range(0, tensor.size(0), rows):
        with safe_open(str(file), framework="pt") as stored:
            tensor[start: start + rows].copy_(stored.get_slice(name)[start: start + rows])
