"""Pretrained models in and out: a local Hugging Face model folder (Marian, T5, GPT-2, BERT, a sentence-transformers
BERT, Llama, Qwen2, Qwen3, Mistral, Gemma, Phi-3, mixtures) or a GGUF file becomes an ordinary aiayn checkpoint
(``import_pretrained``: read by ``aiayn.formats``, a layer below); an aiayn model becomes a Hugging Face folder, a GGUF
file or a CTranslate2 model (``hf_export``, ``gguf_export``, ``ctranslate2``); LoRA adapters in PEFT's format
(``peft``)."""

from __future__ import annotations

from pathlib import Path

from aiayn.decoding.config import imported_defaults
from aiayn.formats.families import SUPPORTED, family_of
from aiayn.formats.gguf import read_gguf
from aiayn.formats.hf_folder import read_config, read_generation
from aiayn.interop import sentence
from aiayn.io.checkpoint import CHECKSUMS, write_checkpoint
from aiayn.io.files import claim_output

__all__ = ["FORMATS", "SUPPORTED", "export_pretrained", "import_pretrained"]

FORMATS = ("hf", "ctranslate2", "gguf")  # what export_pretrained writes


def import_pretrained(folder: str | Path, output: str | Path, overwrite: bool = False) -> Path:
    """Import the Hugging Face model in ``folder`` (or the GGUF file ``folder``) into the aiayn checkpoint folder
    ``output``."""

    claim_output(output, "import", overwrite=overwrite, own_files=(CHECKSUMS,))  # before any reading
    folder = Path(folder)
    if folder.is_file():  # one file: GGUF (llama.cpp's)
        model, tokenizers, generation = read_gguf(folder)
        write_checkpoint(output, model, tokenizers, generation=imported_defaults(model.config, generation),
                         by="import", overwrite=overwrite)
        return Path(output)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such file or folder; give a Hugging Face model folder or a .gguf file")
    config = read_config(folder)
    family = family_of(config, folder / "config.json")
    kind = config["model_type"]
    pooling = sentence.read_pooling(folder) if sentence.is_sentence_transformers(folder) else None
    if pooling is not None and kind != "bert":
        raise ValueError(f"{folder / 'config.json'}: sentence-transformers folders of {kind} models are not "
                         "supported; aiayn imports BERT ones")
    model, tokenizers = family.read(folder, config)  # (a large one tensor by tensor, never the whole folder)
    generation = imported_defaults(model.config, read_generation(folder))
    write_checkpoint(output, model, tokenizers, generation=generation, by="import", overwrite=overwrite,
                     write_extra=None if pooling is None else pooling.save)
    return Path(output)


def export_pretrained(checkpoint: str | Path, output: str | Path, format: str = "hf", quantization: str | None = None,
                      overwrite: bool = False) -> Path:
    """Write the aiayn checkpoint ``checkpoint`` as another tool's files at ``output``, the way back of
    :func:`import_pretrained`: ``hf``, a Hugging Face folder (Marian, Llama / Qwen2 / Mistral / Gemma / Phi-3, GPT-2:
    whichever has the model's shape; ``hf_export``); ``ctranslate2``, a CTranslate2 model through its converters
    (``quantization``: CTranslate2's, default float32); ``gguf``, one GGUF file for llama.cpp (``quantization``: f32,
    f16, bf16, q8_0, q4_0; default f32). What the target cannot express is a ValueError naming it."""
    if format == "gguf":
        from aiayn.interop.gguf_export import export_gguf

        return Path(export_gguf(checkpoint, output, quantization or "f32"))
    if format == "hf":
        from aiayn.interop.hf_export import export_hf

        return Path(export_hf(checkpoint, output, overwrite))
    if format != "ctranslate2":
        raise ValueError(f"format: {format!r}; choose one of {', '.join(FORMATS)}")
    try:
        from aiayn.interop.ctranslate2 import export_ctranslate2
    except ImportError:
        raise ValueError("export --format ctranslate2 needs the ctranslate2 package: pip install ctranslate2") from None
    return Path(export_ctranslate2(checkpoint, output, quantization, overwrite))
