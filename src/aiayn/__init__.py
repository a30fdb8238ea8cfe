"""aiayn: the Transformer of *Attention Is All You Need*, as readable, tested software.

The names below load on first use (PEP 562), so ``import aiayn`` (and ``aiayn --help``) stays light:
torch is imported only when a model, decoding or a tool that needs it is touched.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DecoderOnly": "aiayn.model.decoder_only", "EncoderDecoder": "aiayn.model.transformer",
    "EncoderOnly": "aiayn.model.transformer", "TransformerModel": "aiayn.model.transformer",
    "build_model": "aiayn.model.build", "load_model": "aiayn.model.build", "ModelConfig": "aiayn.model.config",
    "count_parameters": "aiayn.model.params", "generate": "aiayn.decoding", "pack": "aiayn.inference.precision",
    "quantize": "aiayn.inference.precision", "Embedder": "aiayn.inference.embed",
    "import_pretrained": "aiayn.interop", "export_pretrained": "aiayn.interop",
    "DecodingConfig": "aiayn.decoding.config",
    "Translator": "aiayn.inference.translator", "TextGenerator": "aiayn.inference.generator",
    "Trainer": "aiayn.training.trainer", "TrainConfig": "aiayn.training.config",
    "load_tokenizers": "aiayn.tokenizers", "SentencePiecePair": "aiayn.tokenizers.sentencepiece",
    "HFTokenizers": "aiayn.tokenizers.hf", "export_hf": "aiayn.interop.hf_export",
    "export_gguf": "aiayn.interop.gguf_export", "export_ctranslate2": "aiayn.interop.ctranslate2",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
