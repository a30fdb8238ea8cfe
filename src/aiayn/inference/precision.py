"""The copy of a model that decodes: oneDNN-packed float32 or bfloat16 (CPU), int8, or moved to a device.

``pack``: every ``nn.Linear`` becomes a :class:`~aiayn.model.packed.PackedLinear` (oneDNN's kernels with
weights reordered ahead of time: 2x to 2.5x faster for decoding's small batches on some CPUs, equal to the
plain model's results to rounding). ``quantize``: dynamic int8 quantization of every linear layer (weights
int8, activations quantized on the fly; embeddings stay float32, a tied output projection gets its own int8
copy). ``inference_copy`` picks one of them for a product."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from aiayn.model.packed import PackedLinear, check_unpacked, packing_available
from aiayn.model.transformer import TransformerModel


def quantize(model: TransformerModel) -> TransformerModel:
    """An int8 copy of ``model`` for CPU inference, in eval mode; ``generate`` and ``Translator`` take it."""
    check_unpacked(model, "quantize")
    cpu_model = copy.deepcopy(model).cpu().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch marks quantized tensors as deprecated
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization points to torchao
        return torch.ao.quantization.quantize_dynamic(cpu_model, {nn.Linear}, dtype=torch.qint8)


def pack(model: TransformerModel, dtype: torch.dtype | None = None) -> TransformerModel:
    """An inference copy of ``model`` on the CPU (optionally cast to ``dtype``, e.g. torch.bfloat16) whose
    linear layers are :class:`PackedLinear`; ``generate`` and ``Translator`` take it, training cannot."""
    if not packing_available():
        raise RuntimeError("pack: this PyTorch build has no oneDNN (mkldnn); use the model as it is")
    if not packing_available(dtype):
        raise RuntimeError("pack: this CPU has no oneDNN bfloat16 kernels (AVX512 or AVX-NE-CONVERT); pack in "
                           "float32, or decode the plain model in bfloat16 (inference_copy does)")
    check_unpacked(model, "pack")
    packed = copy.deepcopy(model).cpu().eval()
    if dtype is not None:
        packed = packed.to(dtype)
    for module in list(packed.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child, keep_weight=child is getattr(packed, "output", None)))
    return packed.requires_grad_(False)


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
    if packed and torch.device(device).type == "cpu" and packing_available(dtype):
        return pack(model, dtype)
    if bf16:
        model = copy.deepcopy(model)
    return model.eval().to(device, dtype)
