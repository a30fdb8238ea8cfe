"""Linear layers for inference: a weight prepacked once into oneDNN's blocked layout, and the rows of an output
projection (a vocabulary shortlist).

PyTorch's default CPU matrix product for float32 calls a BLAS that, on some CPUs (AMD EPYC here), is 2x to
2.5x slower for decoding's small batches than oneDNN with weights reordered ahead of time (the same kernels
``torch.compile`` uses on CPU when it freezes weights). ``aiayn.inference.precision.pack`` swaps each
``nn.Linear`` of an inference copy for a :class:`PackedLinear` that calls those kernels; the float32
results equal the plain model's to rounding (the sums run in another order). The model's own weights are left untouched.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.io.rows import StackedRows, defer_rows, deferred_rows, rows_of
from aiayn.kernels import simd_path
from aiayn.model import cpu


class PackedLinear(nn.Module):
    """y = x W^T + b, as ``nn.Linear``, for inference on the CPU, in one of two ways:

    - ``dense`` (float32 where aiayn's kernels build, ``cpu.dense_available``; a language model's decoding): W
      kept as ``nn.Linear`` keeps it (the very tensor: a tied token table is held once). Up to ``cpu.F32_MM_ROWS`` rows
      (decoding) go through ``aiayn::f32_mm`` (``kernels/dense.cpp``), which streams W once at the memory's speed;
      more rows (a prompt) through oneDNN's product on the dense W.
    - else W prepacked once into oneDNN's blocked layout (float32 or bfloat16) for its kernels.

    Shape: x (..., in_features) -> (..., out_features), in W's dtype (float32 or bfloat16).
    ``keep_weight``: also keep W as it is beside the packing (the output projection, whose rows a shortlist cuts out).
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = False, dense: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.dense = dense
        self.packed = None if self.dense else torch.ops.mkldnn._reorder_linear_weight(weight)  # oneDNN's layout
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        self.weight = weight.contiguous() if self.dense or keep_weight else None  # (out, in): the model's own

    def forward(self, x: Tensor) -> Tensor:
        if not self.dense:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        if x.numel() // self.in_features > cpu.F32_MM_ROWS:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        y = torch.ops.aiayn.f32_mm(x.reshape(-1, self.in_features), self.weight)  # (rows, N)
        y = y.view(*x.shape[:-1], self.out_features)  # (..., N)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"dense={self.dense}")

    @property
    def kernel(self) -> str:
        """The computation it runs, in words (``aiayn generate --verbose``)."""
        if self.dense:
            return (f"float32 weights, aiayn::f32_mm (its {simd_path()} path) for up to {cpu.F32_MM_ROWS} rows, "
                    "oneDNN's matmul for a prompt")
        return f"{str(self.packed.dtype).removeprefix('torch.')} weights, oneDNN's packed matmul"


def stack_linears(*linears: nn.Linear) -> nn.Linear:
    """One frozen linear layer whose rows are those of ``linears`` in order (inputs shared: the fused Q, K, V or
    gate and up projections of an inference copy). Built without initialisation, which would draw from torch's
    random generator and so change a training whose validation decodes through such a copy. Parts whose rows were
    left unread (``io/rows.py::defer_rows``: a GGUF file's) stack unread."""
    first = linears[0]
    fused = nn.utils.skip_init(nn.Linear, first.in_features, sum(lin.out_features for lin in linears),
                               bias=first.bias is not None, device=first.weight.device, dtype=first.weight.dtype)
    sources = [deferred_rows(lin.weight) for lin in linears]
    with torch.no_grad():
        if all(sources):  # each part's rows left unread for the converter (a GGUF file's): so are the fused ones
            defer_rows(fused.weight, StackedRows(sources))
        else:
            fused.weight.copy_(torch.cat([rows_of(lin.weight)[:] for lin in linears]))  # (sum of N, K)
        if fused.bias is not None:
            fused.bias.copy_(torch.cat([lin.bias for lin in linears]))
    return fused.requires_grad_(False)


def check_unpacked(model: nn.Module, what: str) -> None:
    """Packed weights cannot be copied or converted again: start from the plain model."""
    if any(isinstance(m, PackedLinear) for m in model.modules()):
        raise ValueError(f"{what}: the model is already packed for inference; pass the original model")


def output_rows(layer: nn.Module, ids: Tensor) -> nn.Module:
    """The rows ``ids`` (C,) of an output projection, as a layer of its kind: (..., D) -> (..., C) logits
    for those tokens alone (a vocabulary shortlist, ``aiayn.inference.shortlist``)."""
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
