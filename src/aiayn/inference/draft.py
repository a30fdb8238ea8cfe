"""``--draft``: the draft a product's speculative decoding uses (``decoding/drafts.py``), named on the command line
as ``ngram`` (prompt lookup), ``int4`` or ``int8`` (the checkpoint's own quantized copy: self-speculation), or
another checkpoint with the same tokenizers: a smaller model, or for a translator a CTC or CMLM model that drafts the
whole translation in one pass (a "prophet")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiayn.decoding.drafts import Draft, ModelDraft, NGramDraft, ProphetDraft
from aiayn.inference.load import load_for_use
from aiayn.inference.precision import Precision
from aiayn.io.checkpoint import GENERATION
from aiayn.io.files import read_json
from aiayn.io.run import is_gguf, resolve_checkpoint
from aiayn.model.nonautoregressive import NonAutoregressive
from aiayn.tokenizers import TokenizerPair, load_tokenizers

WAYS = ("ngram", "int4", "int8")  # the ways to draft that name no checkpoint (and "none": no draft)


def load_draft(spec: str | None, checkpoint: str | Path, tokenizers: TokenizerPair, arch: str,
               precision: Precision, prepare: Callable | None = None) -> Draft | None:
    """The draft ``spec`` names for ``checkpoint`` (None: no speculation).

    Args:
        spec: ``ngram``, ``int4``, ``int8`` or a checkpoint (folder, run folder or GGUF file); None: the one the
            checkpoint prefers (:func:`preferred`), if any; ``none``: no draft, whatever it prefers.
        checkpoint: the main model's, which ``int4`` and ``int8`` load again, quantized.
        tokenizers: the main model's; a draft checkpoint's must give the same ids.
        arch: the main model's kind (a draft is of the same kind).
        precision: the main model's; a draft checkpoint is made the same way.
        prepare: what the main model was prepared with (a LoRA adapter), applied to its own quantized copy too.
    """
    spec = preferred(checkpoint) if spec is None else spec
    if spec in (None, "none"):
        return None
    if spec == "ngram":
        return NGramDraft()
    if spec in ("int4", "int8"):
        own = Precision(precision.device, int8=spec == "int8", int4=spec == "int4", few_rows=precision.few_rows)
        model, _, _ = load_for_use(checkpoint, arch, prepare, own.converter())
        return ModelDraft(own.apply(model, own=True))
    folder = resolve_checkpoint(spec)
    if not is_gguf(folder):
        _same_ids(load_tokenizers(folder), tokenizers, spec, checkpoint)  # before its weights are read
    model, theirs, _ = load_for_use(folder, arch, None, precision.converter())
    _same_ids(theirs, tokenizers, spec, checkpoint)
    model = precision.apply(model, own=True)
    return ProphetDraft(model) if isinstance(model, NonAutoregressive) else ModelDraft(model)


def draft_source(checkpoint: str, spec: str | None, precision: dict) -> tuple[str, dict]:
    """The checkpoint and precision flags a draft model (``--draft`` ``spec``, or the one ``checkpoint`` prefers) is
    loaded with, for the child that compiles its step: the checkpoint's own ``int4`` or ``int8`` copy, or another
    checkpoint made as the served one."""
    spec = preferred(checkpoint) if spec is None else spec
    return (checkpoint, {spec: True}) if spec in ("int4", "int8") else (spec, precision)


def preferred(checkpoint: str | Path) -> str | None:
    """The draft a checkpoint prefers: ``"draft"`` in its ``generation.json`` (a way to draft, or a checkpoint, a
    relative one beside the checkpoint's folder), as ``--draft`` takes it; None: none."""
    folder = resolve_checkpoint(checkpoint)
    path = folder / GENERATION
    if is_gguf(folder) or not path.is_file():
        return None
    spec = read_json(path).get("draft")
    if spec is not None and not isinstance(spec, str):
        raise ValueError(f"{path}: draft: give ngram, int4, int8, none or a checkpoint's path, not {spec!r}")
    if spec is None or spec in (*WAYS, "none") or Path(spec).is_absolute():
        return spec
    return str(folder / spec) if (folder / spec).exists() else spec


def _same_ids(theirs: TokenizerPair, ours: TokenizerPair, spec: str, checkpoint) -> None:
    """A draft checkpoint's tokenizers give the main model's ids, or a ValueError naming both."""
    if theirs.src.proto != ours.src.proto or theirs.tgt.proto != ours.tgt.proto:
        raise ValueError(f"--draft: {spec} has other tokenizers than {checkpoint}; a draft must give the same ids "
                         "(train it with the main run's tokenizer/ folder, or use --draft ngram, int4 or int8)")
