"""The checkpoint folder: what it is, writing it atomically, and reading weights back (safetensors + JSON;
never pickle).

A checkpoint folder holds ``config.json`` (the ModelConfig), ``model.safetensors`` (the weights), the
tokenizer model(s) when it has them, and, for resuming training, ``trainer.json`` + ``trainer.safetensors``.
Every folder ends with ``checksums.json`` (the SHA-256 of each file), checked when the model loads: a file
damaged or edited after saving is an error naming it. A run folder of checkpoints: ``aiayn.io.run``.
This module imports no torch at load time (the command line reads it before deciding to).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.io.files import atomic_directory, atomic_write_text, read_json, sha256_file

if TYPE_CHECKING:
    from torch import nn

CONFIG, WEIGHTS, CHECKSUMS = "config.json", "model.safetensors", "checksums.json"
GENERATION = "generation.json"  # the decoding defaults (aiayn.decoding.config.DecodingConfig), when the run chose them
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # a LoRA run's (PEFT's format)


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
