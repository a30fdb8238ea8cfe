"""One record per family of checkpoints other tools write (Hugging Face's ``CONFIG_MAPPING`` and llama.cpp's converter
classes as the anchors): the ``model_type`` values of a Hugging Face folder it reads, the one call that reads such a
folder into aiayn's model and tokenizers, and the GGUF ``general.architecture`` values of its files. Importing
(``aiayn.interop.import_pretrained``) and the GGUF reader (``formats/gguf.py``) look a family up here; nothing else
branches on a folder's model type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiayn.formats import bert, gemma, gpt2, llama, marian, moe, phi3, t5
from aiayn.formats.gguf_arch import GEMMA2, GEMMA3, GPT2, LLAMA, PHI3, QWEN2, QWEN3, QWEN3MOE, GGUFArch


@dataclass(frozen=True)
class Family:
    """A family: ``name``; ``model_types``, the ``config.json`` values it reads; ``read(folder, config)`` -> (model,
    tokenizers), the folder read into aiayn's member (a large one tensor by tensor); ``gguf``, the
    llama.cpp architectures of its GGUF files (``formats/gguf_arch.py``; none: llama.cpp writes no such file aiayn
    reads)."""

    name: str
    model_types: tuple[str, ...]
    read: Callable[[Path, dict], tuple]
    gguf: tuple[GGUFArch, ...] = ()


FAMILIES = (
    Family("marian", marian.MODEL_TYPES, marian.import_marian),
    Family("t5", t5.MODEL_TYPES, t5.import_t5),
    Family("gpt2", gpt2.MODEL_TYPES, gpt2.import_gpt2, gguf=(GPT2,)),
    Family("bert", bert.MODEL_TYPES, bert.import_bert),
    Family("llama", llama.MODEL_TYPES, llama.import_llama, gguf=(LLAMA, QWEN2, QWEN3)),
    Family("gemma", gemma.MODEL_TYPES, gemma.import_gemma, gguf=(GEMMA3, GEMMA2)),
    Family("phi3", phi3.MODEL_TYPES, phi3.import_phi3, gguf=(PHI3,)),
    Family("moe", moe.MODEL_TYPES, moe.import_moe, gguf=(QWEN3MOE,)),  # (a llama file with experts: Mixtral's)
)
SUPPORTED = tuple(kind for family in FAMILIES for kind in family.model_types)  # config.json's model_type values
GGUF_ARCHITECTURES = {arch.name: arch for family in FAMILIES for arch in family.gguf}  # by general.architecture
ARCHITECTURES = tuple(GGUF_ARCHITECTURES)


def family_of(config: dict, source: Path | str) -> Family:
    """The family of a folder's ``config`` (its ``model_type``); another is a ValueError naming ``source``."""
    kind = config.get("model_type")
    found = next((family for family in FAMILIES if kind in family.model_types), None)
    if found is None:
        raise ValueError(f"{source}: model_type {kind!r} is not supported; aiayn imports {', '.join(SUPPORTED)}")
    return found
