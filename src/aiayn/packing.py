"""Fast CPU inference: every linear layer's weight prepacked once into oneDNN's blocked layout.

PyTorch's default CPU matrix product for float32 calls a BLAS that, on some CPUs (AMD EPYC here), is 2x to
2.5x slower for decoding's small batches than oneDNN with weights reordered ahead of time (the same kernels
``torch.compile`` uses on CPU when it freezes weights). ``pack`` swaps each ``nn.Linear`` of an inference
copy for a :class:`PackedLinear` that calls those kernels; the float32 results equal the plain model's to
rounding (the sums run in another order). The model's own weights are left untouched.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from aiayn.models import TransformerModel


def packing_available() -> bool:
    """oneDNN is in this PyTorch build (x86-64 and most AArch64 wheels)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """y = x W^T + b, as ``nn.Linear``, with W prepacked for oneDNN (inference only, CPU).

    Shape: x (..., in_features) -> (..., out_features), in W's dtype (float32 or bfloat16).
    ``keep_weight``: also keep W as it is (the output projection, whose rows a shortlist cuts out).
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight)  # (out, in), oneDNN's blocked layout
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        self.weight = weight if keep_weight else None  # the model's own tensor (the embedding's, when tied)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def check_unpacked(model: nn.Module, what: str) -> None:
    """Packed weights cannot be copied or converted again: start from the plain model."""
    if any(isinstance(m, PackedLinear) for m in model.modules()):
        raise ValueError(f"{what}: the model is already packed for inference; pass the original model")


def pack(model: TransformerModel, dtype: torch.dtype | None = None) -> TransformerModel:
    """An inference copy of ``model`` on the CPU (optionally cast to ``dtype``, e.g. torch.bfloat16) whose
    linear layers are :class:`PackedLinear`; ``generate`` and ``Translator`` take it, training cannot."""
    if not packing_available():
        raise RuntimeError("pack: this PyTorch build has no oneDNN (mkldnn); use the model as it is")
    check_unpacked(model, "pack")
    packed = copy.deepcopy(model).cpu().eval()
    if dtype is not None:
        packed = packed.to(dtype)
    for module in list(packed.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child, keep_weight=child is getattr(packed, "output", None)))
    return packed.requires_grad_(False)


def output_rows(layer: nn.Module, ids: Tensor) -> nn.Module:
    """The rows ``ids`` (C,) of an output projection, as a layer of its kind: (..., D) -> (..., C) logits
    for those tokens alone (a vocabulary shortlist, ``aiayn.shortlist``)."""
    if isinstance(layer, PackedLinear) and layer.weight is not None:
        return PackedLinear(_rows(layer.weight, layer.bias, ids))
    if type(layer) is nn.Linear:
        return _rows(layer.weight, layer.bias, ids)
    raise ValueError(f"shortlist: the rows of a {type(layer).__name__} output layer cannot be cut out (an int8 "
                     f"model); decode without --int8 or without --shortlist")


def _rows(weight: Tensor, bias: Tensor | None, ids: Tensor) -> nn.Linear:
    rows = nn.utils.skip_init(nn.Linear, weight.size(1), ids.numel(), bias=bias is not None,
                              device=weight.device, dtype=weight.dtype)
    rows.weight = nn.Parameter(weight.detach()[ids], requires_grad=False)  # (C, D)
    if bias is not None:
        rows.bias = nn.Parameter(bias.detach()[ids], requires_grad=False)  # (C,)
    return rows
