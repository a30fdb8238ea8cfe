"""What every product (translate, generate, fill-mask, serve) does with a checkpoint before using it:
load it, check it is the family member the product needs (the precision copy: ``aiayn.inference.precision``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiayn.io.checkpoint import verify_checkpoint
from aiayn.io.files import give_back_memory
from aiayn.io.run import resolve_checkpoint
from aiayn.model.build import load_model
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import TokenizerPair, load_tokenizers

COMMANDS = {"encoder-decoder": "aiayn translate", "decoder-only": "aiayn generate",
            "encoder-only": "aiayn fill-mask"}


def load_checkpoint(path: str | Path, arch: str | None = None,
                    prepare: Callable[[TransformerModel], object] | None = None,
                    convert: Callable | None = None) -> tuple[TransformerModel, TokenizerPair]:
    """The model and tokenizers of a checkpoint folder or run folder (its best/); with ``arch``, a checkpoint
    of another family member is a ValueError that names the command for it. ``prepare(model)`` runs on the
    loaded model before anything uses it (``--adapter``: a LoRA adapter put on it, ``aiayn.interop.peft``).
    ``convert``: the inference copy made layer by layer as the weights are read
    (``aiayn.inference.precision.converter``; not with ``prepare``, which needs the plain layers)."""
    folder = resolve_checkpoint(path)
    verify_checkpoint(folder)
    tokenizers = load_tokenizers(folder)  # first, and its parse's memory given back: a 262,144-piece BPE tokenizer
    give_back_memory()  # peaks 340 MB above what it keeps, which would add to the weights' peak after them
    model = load_model(folder, convert=convert if prepare is None else None, verify=False)
    if arch is not None and model.config.arch != arch:
        raise ValueError(f"{folder} is a {model.config.arch} checkpoint; use {COMMANDS[model.config.arch]}")
    if prepare is not None:
        prepare(model)
    return model, tokenizers
