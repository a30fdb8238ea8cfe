"""Pretrained models in and out: a local Hugging Face model folder (Marian, T5, GPT-2, BERT, a sentence-transformers
BERT, Llama, Qwen2, Qwen3, Mistral, Gemma, Phi-3, mixtures) or a GGUF file becomes an ordinary aiayn checkpoint
(``import_pretrained``: read by ``aiayn.formats``, a layer below); an aiayn model becomes a Hugging Face folder, a GGUF
file or a CTranslate2 model (``hf_export``, ``gguf_export``, ``ctranslate2``); LoRA adapters in PEFT's format
(``peft``)."""

from __future__ import annotations

from pathlib import Path

from aiayn.decoding.config import imported_defaults
from aiayn.formats import bert, gemma, gpt2, llama, marian, moe, phi3, t5
from aiayn.formats.gguf import read_gguf
from aiayn.formats.hf_folder import SUPPORTED, read_config, read_generation, read_weights
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
    kind = config["model_type"]
    pooling = sentence.read_pooling(folder) if sentence.is_sentence_transformers(folder) else None
    if pooling is not None and kind != "bert":
        raise ValueError(f"{folder / 'config.json'}: sentence-transformers folders of {kind} models are not "
                         "supported; aiayn imports BERT ones")
    if kind in llama.MODEL_TYPES:  # large: read tensor by tensor, never the whole folder at once
        model, tokenizers = llama.import_llama(folder, config)
    elif kind in gemma.MODEL_TYPES:
        model, tokenizers = gemma.import_gemma(folder, config)
    elif kind in phi3.MODEL_TYPES:
        model, tokenizers = phi3.import_phi3(folder, config)
    elif kind in moe.MODEL_TYPES:
        model, tokenizers = moe.import_moe(folder, config)
    else:
        importers = {"marian": marian.import_marian, "gpt2": gpt2.import_gpt2, "bert": bert.import_bert,
                     "t5": t5.import_t5, "mt5": t5.import_t5}
        model, tokenizers = importers[kind](folder, config, read_weights(folder))
    generation = imported_defaults(model.config, read_generation(folder))
    write_checkpoint(output, model, tokenizers, generation=generation, by="import", overwrite=overwrite,
                     write_extra=None if pooling is None else pooling.save)
    return Path(output)
