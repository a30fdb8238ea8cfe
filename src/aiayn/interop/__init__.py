"""Pretrained models in and out: a local Hugging Face model folder (Marian, GPT-2, BERT) becomes an ordinary
aiayn checkpoint (``import_pretrained``); an aiayn translator becomes a Marian folder or a CTranslate2 model
(``hf_export``, ``ctranslate2``). The folder's reading is ``hf_folder``; each family member maps its own
tensors (``marian``, ``gpt2``, ``bert``).
"""

from __future__ import annotations

from pathlib import Path

from aiayn.interop import bert, gpt2, marian
from aiayn.interop.hf_folder import SUPPORTED, read_config, read_generation, read_weights
from aiayn.io.checkpoint import CHECKSUMS, write_checkpoint
from aiayn.io.files import claim_output

__all__ = ["SUPPORTED", "import_pretrained"]


def import_pretrained(folder: str | Path, output: str | Path, overwrite: bool = False) -> Path:
    """Import the Hugging Face model in ``folder`` into the aiayn checkpoint folder ``output``."""

    claim_output(output, "import", overwrite=overwrite, own_files=(CHECKSUMS,))  # before any reading
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder; give a Hugging Face model folder")
    config = read_config(folder)
    importers = {"marian": marian.import_marian, "gpt2": gpt2.import_gpt2, "bert": bert.import_bert}
    importer = importers[config["model_type"]]
    model, tokenizers = importer(folder, config, read_weights(folder))
    write_checkpoint(output, model, tokenizers, generation=read_generation(folder), by="import", overwrite=overwrite)
    return Path(output)
