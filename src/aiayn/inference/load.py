"""What every product (translate, generate, fill-mask, serve) does with a checkpoint before using it:
load it (a checkpoint folder, or a GGUF file as it is), check it is the family member the product needs (the
precision copy: ``aiayn.inference.precision``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiayn.decoding.config import DecodingConfig, imported_defaults
from aiayn.io.checkpoint import Converter, converted_parts, verify_checkpoint
from aiayn.io.files import give_back_memory
from aiayn.io.rows import read_deferred
from aiayn.io.run import is_gguf, resolve_checkpoint
from aiayn.model.build import load_model
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import TokenizerPair, load_tokenizers

COMMANDS = {"encoder-decoder": "aiayn translate", "decoder-only": "aiayn generate",
            "encoder-only": "aiayn fill-mask"}


def checkpoint_arch(path: str | Path) -> str:
    """The family member a checkpoint folder, run folder or GGUF file (a language model) holds, from its config
    alone (nothing loaded)."""
    from aiayn.io.checkpoint import CONFIG
    from aiayn.model.config import ModelConfig

    folder = resolve_checkpoint(path)
    return "decoder-only" if is_gguf(folder) else ModelConfig.load(folder / CONFIG).arch


def load_checkpoint(path: str | Path, arch: str | None = None,
                    prepare: Callable[[TransformerModel], object] | None = None,
                    convert: Converter | None = None) -> tuple[TransformerModel, TokenizerPair]:
    """The model and tokenizers of a checkpoint folder or run folder (its best/), or of a GGUF file; with ``arch``,
    a checkpoint of another family member is a ValueError that names the command for it.
    ``prepare(model)`` runs on the loaded model before anything uses it (``--adapter``: a LoRA adapter put on it,
    ``aiayn.interop.peft``). ``convert``: the inference copy made layer by layer as the weights are read
    (``aiayn.inference.precision.converter``; not with ``prepare``, which needs the plain layers)."""
    model, tokenizers, _ = load_for_use(path, arch, prepare, convert)
    return model, tokenizers


def load_for_use(path: str | Path, arch: str | None = None,
                 prepare: Callable[[TransformerModel], object] | None = None,
                 convert: Converter | None = None) -> tuple[TransformerModel, TokenizerPair, DecodingConfig]:
    """:func:`load_checkpoint`'s model and tokenizers, and the checkpoint's decoding defaults: its
    ``generation.json``, or a GGUF file's sampling metadata as ``aiayn import`` would write them (the file read by
    ``aiayn.formats.gguf``, a layer below: every product runs one as it is)."""
    folder = resolve_checkpoint(path)
    if is_gguf(folder):
        model, tokenizers, decoding = _load_gguf(folder, prepare, convert)
    else:
        verify_checkpoint(folder)
        tokenizers = load_tokenizers(folder)  # first, and its parse's memory given back: a 262,144-piece BPE
        give_back_memory()  # tokenizer peaks 340 MB above what it keeps, which would add to the weights' peak after
        model = load_model(folder, convert=convert if prepare is None else None, verify=False)
        decoding = DecodingConfig.load(folder)
    if arch is not None and model.config.arch != arch:
        raise ValueError(f"{folder} is a {model.config.arch} checkpoint; use {COMMANDS[model.config.arch]}")
    if prepare is not None:
        prepare(model)
    return model, tokenizers, decoding


def _load_gguf(path: Path, prepare, convert: Converter | None
               ) -> tuple[TransformerModel, TokenizerPair, DecodingConfig]:
    """A GGUF file's model, made the inference copy ``convert`` makes layer by layer. A quantizing converter reads
    each matrix from the file a block of rows at a time, and keeps the blocks of the types its layers hold as they
    are (Q8_0 for ``--int8``, Q4_0, Q4_1 and Q4_K for ``--int4``: ``formats/gguf_rows.py``): no float32 copy."""
    from aiayn.formats.gguf import read_gguf  # (here: a checkpoint folder's products start 40 ms sooner)

    convert = convert if prepare is None else None
    rows = convert is not None and convert.reads_rows and convert.dtype is None
    model, tokenizers, sampling = read_gguf(path, rows=rows)  # (nothing left unread without a converter)
    for _, part in converted_parts(model) if convert is not None else []:
        convert(part)
        read_deferred(part)  # what the converter did not replace, read now
        give_back_memory()
    return model, tokenizers, DecodingConfig().replace(**(imported_defaults(model.config, sampling) or {}))
