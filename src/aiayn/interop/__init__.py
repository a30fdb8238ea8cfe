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

__all__ = ["SUPPORTED", "import_pretrained"]


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
