"""What every product (translate, generate, fill-mask, serve) does with a checkpoint before using it:
load it, check it is the family member the product needs, and make its inference copy."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from aiayn.checkpoint import resolve_checkpoint
from aiayn.models import TransformerModel
from aiayn.packing import pack, packing_available
from aiayn.quantization import quantize
from aiayn.tokenizer import TokenizerPair

COMMANDS = {"encoder-decoder": "aiayn translate", "decoder-only": "aiayn generate",
            "encoder-only": "aiayn fill-mask"}


def load_checkpoint(path: str | Path, arch: str | None = None) -> tuple[TransformerModel, TokenizerPair]:
    """The model and tokenizers of a checkpoint folder or run folder (its best/); with ``arch``, a checkpoint
    of another family member is a ValueError that names the command for it."""
    folder = resolve_checkpoint(path)
    model = TransformerModel.load(folder)
    if arch is not None and model.config.arch != arch:
        raise ValueError(f"{folder} is a {model.config.arch} checkpoint; use {COMMANDS[model.config.arch]}")
    return model, TokenizerPair.load(folder)


def inference_copy(model: TransformerModel, device: torch.device | str = "cpu", int8: bool = False,
                   bf16: bool = False, packed: bool = True) -> TransformerModel:
    """The model as it will decode: int8, oneDNN-packed (CPU, float32 or bfloat16), or moved (and cast to
    bfloat16 in a copy: the caller's model keeps its dtype)."""
    if int8 and torch.device(device).type != "cpu":
        raise ValueError("--int8: dynamic int8 quantization runs on the CPU only; use --device cpu")
    if int8 and bf16:
        raise ValueError("--int8 and --bf16: choose one precision")
    dtype = torch.bfloat16 if bf16 else None
    if int8:
        return quantize(model)
    if packed and torch.device(device).type == "cpu" and packing_available():
        return pack(model, dtype)
    if bf16:
        model = copy.deepcopy(model)
    return model.eval().to(device, dtype)
