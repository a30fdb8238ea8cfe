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
from aiayn.io.run import is_gguf, resolve_checkpoint
from aiayn.model.nonautoregressive import NonAutoregressive
from aiayn.tokenizers import TokenizerPair, load_tokenizers

WAYS = ("ngram", "int4", "int8")  # the ways to draft that name no checkpoint


def load_draft(spec: str | None, checkpoint: str | Path, tokenizers: TokenizerPair, arch: str,
               precision: Precision, prepare: Callable | None = None) -> Draft | None:
    """The draft ``spec`` names for ``checkpoint`` (None: no speculation).

    Args:
        spec: ``ngram``, ``int4``, ``int8`` or a checkpoint (folder, run folder or GGUF file).
        checkpoint: the main model's, which ``int4`` and ``int8`` load again, quantized.
        tokenizers: the main model's; a draft checkpoint's must give the same ids.
        arch: the main model's kind (a draft is of the same kind).
        precision: the main model's; a draft checkpoint is made the same way.
        prepare: what the main model was prepared with (a LoRA adapter), applied to its own quantized copy too.
    """
    if spec is None:
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


def _same_ids(theirs: TokenizerPair, ours: TokenizerPair, spec: str, checkpoint) -> None:
    """A draft checkpoint's tokenizers give the main model's ids, or a ValueError naming both."""
    if theirs.src.proto != ours.src.proto or theirs.tgt.proto != ours.tgt.proto:
        raise ValueError(f"--draft: {spec} has other tokenizers than {checkpoint}; a draft must give the same ids "
                         "(train it with the main run's tokenizer/ folder, or use --draft ngram, int4 or int8)")
