"""int8 inference on the CPU: dynamic quantization of every linear layer (weights int8, activations
quantized on the fly). The embeddings stay float32; a tied output projection gets its own int8 copy."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from aiayn.models import TransformerModel
from aiayn.packing import check_unpacked


def quantize(model: TransformerModel) -> TransformerModel:
    """An int8 copy of ``model`` for CPU inference, in eval mode; ``generate`` and ``Translator`` take it."""
    check_unpacked(model, "quantize")
    cpu_model = copy.deepcopy(model).cpu().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch marks quantized tensors as deprecated
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization points to torchao
        return torch.ao.quantization.quantize_dynamic(cpu_model, {nn.Linear}, dtype=torch.qint8)
