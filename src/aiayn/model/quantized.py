"""Int8 and int4 linear layers for CPU decoding: the weights stored in 8 or 4 bits with float scales.

Decoding one token reads every weight once and does little arithmetic with it: on a CPU its speed is the
memory's, and fewer bytes per weight is more tokens a second. Where aiayn's own kernels build
(:mod:`aiayn.kernels`, most machines with a C++ compiler), both layers keep a scale per group of 32 weights of a
row (:class:`Int8Linear` w = q d, llama.cpp's Q8_0; :class:`Int4Linear` w = q d + mn, its Q4_1) and a few rows at
a time (decoding) are quantized to int8 per group too, for integer dot products (``aiayn::q8a8_mm``,
``aiayn::q4a8_mm``). Elsewhere they keep PyTorch's layouts and kernels: :class:`Int8Linear` one scale per output
row (w = q * s, q in [-127, 127]), :class:`Int4Linear` one scale and one offset per group of ``group_size``
(w = (q - 8) * s + z, q in [0, 15], the layout of PyTorch's int4 kernel), through its weight-only
matrix-vector kernels (``_weight_int8pack_mm``, ``_weight_int4pack_mm_for_cpu``) with bfloat16 activations
where the CPU has bfloat16 kernels; on a CPU without native bfloat16 but with exact int8 dot products int8
quantizes the activations too, one scale a row, for oneDNN's integer products. Many rows (a prompt) go through
the weights dequantized (to bfloat16 where the CPU computes in it), one layer at a time, and a dense product.
``aiayn.inference.precision.quantize`` builds them. (torch's dynamic int8, one scale a tensor for the weights
and the activations, took a real model's perplexity from 30.1 to 97.1: docs/decoding.md.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.io.rows import Blocks, rows_of
from aiayn.kernels import quant, simd_path
from aiayn.model import cpu
from aiayn.model.int4_layout import LAYOUTS, layouts_of, unpack_int4


def _ours(bits: int, layer: nn.Module) -> str:
    """The ``kernel`` words of a layer that runs aiayn's ``q{bits}a8_mm``."""
    return (f"int{bits} weights x int8 activations, groups of 32 (aiayn::q{bits}a8_mm, its {simd_path()} path; "
            f"a prompt in {str(layer.dtype).removeprefix('torch.')})")


def _output(y: Tensor, x: Tensor, n: int, bias: Tensor | None) -> Tensor:
    """The kernel's (rows, N') result as the layer's output: (..., n) in x's dtype, bias added."""
    y = (y if y.size(1) == n else y[:, :n]).to(x.dtype).reshape(*x.shape[:-1], n)  # (..., N)
    return y if bias is None else y + bias.to(x.dtype)


def _dequantized_product(layer: nn.Module, x: Tensor) -> Tensor:
    """x W^T + b for many rows (a prompt): W dequantized to the kernels' dtype (bfloat16 where the CPU has its
    kernels: a prompt's product at bfloat16 speed) for this call, the result in x's dtype."""
    y = F.linear(x.to(layer.dtype), layer.dequantized(layer.dtype)).to(x.dtype)  # (..., N)
    return y if layer.bias is None else y + layer.bias.to(x.dtype)


PACK_ROWS = 1024  # rows quantized at a time (a multiple of the int4 kernel's 64-row blocks)


class Concatenated:
    """``torch.cat`` of each of a layer's packed blocks' tensors, written in place as the blocks come (each block
    covering ``r`` of the weight's ``rows``): a big layer's packing is never held twice, its blocks and their
    concatenation. ``add(r, tensors)``, then ``parts``."""

    def __init__(self, rows: int) -> None:
        self.rows, self.done, self.parts = rows, 0, []

    def add(self, r: int, tensors) -> None:
        if not self.parts:
            self.parts = [t.new_empty((self.rows * t.size(0) // r, *t.shape[1:])) for t in tensors]
        for out, t in zip(self.parts, tensors, strict=True):
            start = self.done * out.size(0) // self.rows
            out[start: start + t.size(0)] = t
        self.done += r


def stored_grid(weight, bits: int, start: int, stop: int) -> tuple[Tensor, Tensor, Tensor | None] | None:
    """Rows start:stop of a weight whose rows are read from a file that stores them as a grouped layer of ``bits``
    keeps them (a GGUF file's Q8_0; Q4_0, Q4_1, Q4_K: :class:`~aiayn.formats.gguf_rows.GGUFRows`): (q, d, m),
    w = q d + m per group of 32 (:class:`~aiayn.io.rows.Blocks`). None for any other weight: it is quantized
    from its float32 rows."""
    return weight.grid(bits, start, stop) if isinstance(weight, Blocks) else None


def q8_grouped(weight) -> tuple[Tensor, Tensor]:
    """A weight (N, K) (a tensor, or rows read a slice at a time: :class:`~aiayn.io.rows.StoredRows`) as
    llama.cpp's Q8_0, q d per group of 32 of a row (d = max|w| / 127 in float16), in
    :func:`aiayn.kernels.quant.pack_q8`'s packing: (packed (N'/4, G, 128) int8, scales (N'/4, G, 4) float16), the
    rows padded to a multiple of 4 with zeros."""
    n, k = weight.shape
    padded = -(-n // 4) * 4
    packing = Concatenated(padded)
    for start in range(0, padded, PACK_ROWS):  # a block of rows at a time: no float32 copy of a big layer
        size = min(PACK_ROWS, padded - start)
        stored = stored_grid(weight, 8, start, min(start + size, n))
        if stored is not None:  # a file's Q8_0 blocks, as they are
            q, d = (F.pad(t, (0, 0, 0, size - t.size(0))) for t in stored[:2])
        else:
            rows = weight[start: start + PACK_ROWS].float()  # (r, K)
            groups = F.pad(rows, (0, 0, 0, size - rows.size(0))).view(-1, k // quant.GROUP, quant.GROUP)  # (r, G, 32)
            d = (groups.abs().amax(-1) / 127).clamp_min(2 ** -14).half().float()  # (r, G): float16's own
            q = (groups / d[..., None]).round_().clamp_(-127, 127).to(torch.int8).view(groups.size(0), -1)
        packing.add(size, quant.pack_q8(q, d))
    packed, scales = packing.parts
    return packed, scales


class Int8Linear(nn.Module):
    """y = x (q s)^T + b with q int8 per output row, s = max|w_row| / 127 (symmetric, weight-only).

    Where aiayn's kernels build (``grouped``, default :func:`cpu.kernels_available` unless ``w8a8`` is given), one
    scale per group of 32 weights of a row instead (llama.cpp's Q8_0) and the activations quantized alike, a few rows
    through ``aiayn::q8a8_mm``. Elsewhere two kernels, chosen by the CPU (``w8a8``, default
    :func:`cpu.int8_activations`): bfloat16 activations through the
    weight-only kernel (a prompt's many rows through the weight dequantized to bfloat16), or the activations
    quantized too, one scale a row (x = p t, p int8), and integer products (``torch._int_mm``, oneDNN's int8
    kernels: y = (p q^T) t s), as llama.cpp's Q8_0 x Q8_0 and vLLM's W8A8 do. On a CPU without exact int8 dots
    (integer products only when asked for there) q = 2 h + l is multiplied as two products whose weights, h in
    [-64, 63] and l in {0, 1}, keep oneDNN's 16-bit pair sums from saturating: the same result, at twice the work.

    Shape: x (..., in_features) -> (..., out_features), in x's dtype.
    """

    def __init__(self, linear: nn.Linear, w8a8: bool | None = None, grouped: bool | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = None if linear.bias is None else linear.bias.detach().float().clone()
        if grouped is None:
            grouped = w8a8 is None and cpu.kernels_available() and self.in_features % quant.GROUP == 0
        self.grouped = grouped
        weight = rows_of(linear.weight)  # read a block of rows at a time: no float32 copy of a big layer at once
        if grouped:
            self._grouped(weight)
            return
        blocks = Concatenated(self.out_features)
        for start in range(0, self.out_features, PACK_ROWS):
            rows = weight[start: start + PACK_ROWS].float()  # (r, K)
            s = rows.abs().amax(dim=1).clamp_min(1e-12) / 127  # (r,)
            blocks.add(rows.size(0), (s, (rows / s[:, None]).round_().clamp_(-127, 127).to(torch.int8)))
        scale, self.q = blocks.parts  # (N,), (N, K)
        self.w8a8 = cpu.int8_activations() if w8a8 is None else w8a8
        self.halves = None  # (h, l) with q = 2 h + l, where the CPU's int8 dot products are not exact
        if self.w8a8 and not cpu.exact_int8_dot():
            high = torch.div(self.q, 2, rounding_mode="floor")  # (N, K) in [-64, 63]
            self.halves = (high, self.q - 2 * high)  # l in {0, 1}
        self.scale, self.dtype = scale, torch.float32 if self.w8a8 else torch.bfloat16
        self.kernel_scale = scale.to(self.dtype)  # (N,), the activations' dtype, as the kernel wants

    def _grouped(self, weight) -> None:
        """q d per group of 32 of a row, packed for ``aiayn::q8a8_mm`` (:func:`q8_grouped`)."""
        self.packed, self.scales = q8_grouped(weight)  # (N'/4, G, 128), (N'/4, G, 4)
        self.w8a8, self.halves, self.dtype = True, None, cpu.prompt_dtype()

    def dequantized(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The weight the layer multiplies by, (N, K), in ``dtype``."""
        if self.grouped:  # aiayn's kernels are loaded: their one-pass dequantization (quant.dequantize_q8's math)
            return torch.ops.aiayn.dequantize_q8(self.packed, self.scales, dtype)[: self.out_features]
        return self.q.to(dtype) * self.scale[:, None].to(dtype)

    @property
    def kernel(self) -> str:
        """The computation it runs, in words (``aiayn generate --verbose``)."""
        if self.grouped:
            return _ours(8, self)
        if self.w8a8:
            return "int8 weights x int8 activations, integer products (torch._int_mm)"
        return "int8 weights x bfloat16 activations (aten._weight_int8pack_mm)"

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features)  # (rows, K)
        if self.grouped:
            if rows.size(0) > cpu.MATVEC_ROWS:
                return _dequantized_product(self, x)
            y = torch.ops.aiayn.q8a8_mm(rows.float(), self.packed, self.scales)  # (rows, N')
            return _output(y, x, self.out_features, self.bias)
        if self.w8a8:
            rows = rows.float()
            step = rows.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127  # (rows, 1): t
            p = (rows / step).round_().to(torch.int8)  # (rows, K)
            if self.halves is None:
                y = torch._int_mm(p, self.q.t())  # (rows, N) int32
            else:
                y = torch._int_mm(p, self.halves[0].t()) * 2 + torch._int_mm(p, self.halves[1].t())
            y = y.float().mul_(step).mul_(self.scale)  # (rows, N)
            return _output(y, x, self.out_features, self.bias)
        if rows.size(0) > cpu.MATVEC_ROWS:
            return _dequantized_product(self, x)
        rows = rows.to(self.dtype).contiguous()  # the kernels read it densely
        y = torch.ops.aten._weight_int8pack_mm(rows, self.q, self.kernel_scale)  # (rows, N)
        return _output(y, x, self.out_features, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"activations={'int8' if self.w8a8 else 'bfloat16'}, grouped={self.grouped}")


class Int4Linear(nn.Module):
    """y = x W^T + b with W = (q - 8) s + z group-wise: q in [0, 15], one (s, z) per ``group_size`` weights of a
    row, from the group's min and max (asymmetric, weight-only).

    Two kernels for a few rows (decoding), chosen by ``w4a8`` (default: wherever aiayn's kernel builds on this
    machine, :func:`cpu.kernels_available`): the activations quantized to int8 per group of 32 and integer dot products
    (``aiayn::q4a8_mm``, as llama.cpp's Q4_1 x Q8_1: 2-4x PyTorch's kernel on 2 cores, docs/decoding.md); or
    PyTorch's weight-only kernel with bfloat16 activations (``_weight_int4pack_mm_for_cpu``). A prompt's many rows
    go through the weights dequantized.

    Shape: x (..., in_features) -> (..., out_features), in x's dtype. in_features must be a multiple of
    ``group_size`` (32, 64, 128 or 256; 32 for ``w4a8``); the rows are padded to a multiple of 16 inside.
    """

    def __init__(self, linear: nn.Linear, group_size: int = 32, w4a8: bool | None = None) -> None:
        super().__init__()
        n, k = linear.out_features, linear.in_features
        if k % group_size:
            raise ValueError(f"int4: in_features {k} is not a multiple of the group size {group_size}")
        self.in_features, self.out_features, self.group_size = k, n, group_size
        self.w4a8 = cpu.kernels_available() and group_size == quant.GROUP if w4a8 is None else w4a8
        padded = -(-n // 16) * 16
        weight, blocks = rows_of(linear.weight), Concatenated(padded)  # (rows read a block at a time: rows_of)
        fits = set(LAYOUTS)  # the layouts every block's packing fits so far
        for start in range(0, padded, PACK_ROWS):  # a block of rows at a time: no float32 copy of a big layer
            size = min(PACK_ROWS, padded - start)
            stored = stored_grid(weight, 4, start, min(start + size, n)) if self.w4a8 else None
            if stored is not None:  # a file's Q4_0, Q4_1 or Q4_K blocks, as they are
                q, scale, low = (F.pad(t, (0, 0, 0, size - t.size(0))) for t in stored)
            else:
                rows = weight[start: start + PACK_ROWS].float()  # (r, K)
                q, scale, low = self._quantized(F.pad(rows, (0, 0, 0, size - rows.size(0))))
            if self.w4a8:
                blocks.add(size, quant.pack_q4(q, scale, low))
            else:
                packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.int(), 1)  # (r, K/2)
                fits = layouts_of(packed, q, fits)
                blocks.add(size, (packed, q[:, 0::2] | (q[:, 1::2] << 4), scale, low))
        parts = blocks.parts
        self.bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.layout = self.nibbles = None
        if self.w4a8:
            self.packed, self.scales = parts  # (N'/4, K/32, 64) uint8, (N'/4, K/32, 8) float16
            self.dtype = cpu.prompt_dtype()
            return
        q_packed, nibbles, scale, low = parts
        self.dtype = cpu.kernel_dtype()
        scale_zero = torch.stack([scale, low + 8 * scale], dim=-1).transpose(0, 1)  # (K/G, N', 2)
        self.scale_zero = scale_zero.to(self.dtype).contiguous()  # in the activations' dtype, as the kernel wants
        self.packed = q_packed  # (N', K/2), the kernel's layout
        self.layout = next((ly for ly in LAYOUTS if ly in fits), None)  # how dequantized() reads self.packed
        self.nibbles = None if self.layout else nibbles  # else (N', K/2): two weights a byte, a second copy

    def _quantized(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rows (r, K) of the weight in 4 bits: q (r, K) uint8, scale and low (r, K/G): w ~ q scale + low."""
        groups = rows.view(rows.size(0), -1, self.group_size)  # (r, K/G, G)
        low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # (r, K/G)
        scale = ((high - low) / 15).clamp_min(1e-12)
        q = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.uint8).view(rows.shape)
        return q, scale, low

    def dequantized(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The weight the layer multiplies by, (N, K), in ``dtype`` (from the scales and offsets the kernel reads)."""
        if self.w4a8:  # aiayn's kernels are loaded: their one-pass dequantization (quant.dequantize_q4's math)
            return torch.ops.aiayn.dequantize_q4(self.packed, self.scales, dtype)[: self.out_features]
        if self.layout is not None:
            q = unpack_int4(self.packed, self.in_features, self.layout)  # (N', K)
        else:
            q = torch.stack([self.nibbles & 15, self.nibbles >> 4], dim=-1).view(-1, self.in_features)  # (N', K)
        scale, zero = self.scale_zero.to(dtype).transpose(0, 1).unbind(-1)  # (N', K/G) each
        groups = (q.to(dtype) - 8).view(q.size(0), -1, self.group_size)  # (N', K/G, G)
        weight = (groups * scale[..., None] + zero[..., None]).view(q.size(0), -1)  # (N', K)
        return weight[: self.out_features]

    @property
    def kernel(self) -> str:
        """The computation it runs, in words (``aiayn generate --verbose``)."""
        if self.w4a8:
            return _ours(4, self)
        return (f"int4 weights x {str(self.dtype).removeprefix('torch.')} activations, groups of {self.group_size} "
                "(aten._weight_int4pack_mm_for_cpu)")

    def forward(self, x: Tensor) -> Tensor:
        if x.numel() // self.in_features > cpu.MATVEC_ROWS:
            return _dequantized_product(self, x)
        rows = x.reshape(-1, self.in_features)  # (rows, K)
        if self.w4a8:
            y = torch.ops.aiayn.q4a8_mm(rows.float(), self.packed, self.scales)  # (rows, N')
            return _output(y, x, self.out_features, self.bias)
        rows = rows.to(self.dtype).contiguous()  # the kernels read it densely
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size,
                                                      self.scale_zero)  # (rows, N')
        return _output(y, x, self.out_features, self.bias)

    def extra_repr(self) -> str:
        activations = "int8" if self.w4a8 else str(self.dtype).removeprefix("torch.")
        return (f"in_features={self.in_features}, out_features={self.out_features}, group_size={self.group_size}, "
                f"bias={self.bias is not None}, activations={activations}")

