"""The weights of ``aiayn::q4a8_mm`` and ``aiayn::q8a8_mm`` (matvec.cpp) and their math in torch operations.

int4: w[n, 32 g + j] = q d[n, g] + mn[n, g], q in [0, 15] (llama.cpp's Q4_1; Q4_0 is mn = -8 d), kept as
``packed`` (N/4, G, 64) uint8, four rows at a time, each row's group as 16 bytes whose byte j holds weight j (low
nibble) and j + 16 (high), and ``scales`` (N/4, G, 8) float16, the four rows' d then their mn.
int8: w[n, 32 g + j] = q d[n, g], q in [-127, 127] (llama.cpp's Q8_0), ``packed`` (N/4, G, 128) int8, each row's
group as 32 bytes, and ``scales`` (N/4, G, 4) float16.
Activations are quantized per row and group of 32: p = round(x / dx), dx = max|x| / 127 (llama.cpp's Q8_1), so
that y[m, n] = sum_g d dx (q . p) (+ mn dx sum(p) for int4): integer dot products, one scale product a group.
"""

from __future__ import annotations

import torch
from torch import Tensor

GROUP = 32


def pack_q4(q: Tensor, d: Tensor, mn: Tensor) -> tuple[Tensor, Tensor]:
    """q (N, K) uint8 in [0, 15], d and mn (N, K/32) -> (packed (N/4, G, 64) uint8, scales (N/4, G, 8) float16).
    N must be a multiple of 4 and K of 32."""
    n, k = q.shape
    groups = k // GROUP
    quads = q.view(n // 4, 4, groups, GROUP).transpose(1, 2)  # (N/4, G, 4, 32)
    packed = (quads[..., :16] | (quads[..., 16:] << 4)).reshape(n // 4, groups, 64)  # (N/4, G, 64)
    per_quad = [t.half().view(n // 4, 4, groups).transpose(1, 2) for t in (d, mn)]  # (N/4, G, 4) each
    return packed.contiguous(), torch.cat(per_quad, -1).contiguous()  # scales (N/4, G, 8)


def unpack_q4(packed: Tensor, scales: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`pack_q4` undone: (q (N, K) uint8, d (N, G) float32, mn (N, G) float32)."""
    quads, groups = packed.shape[:2]
    nibbles = packed.view(quads, groups, 4, 16)  # (N/4, G, 4, 16)
    q = torch.cat([nibbles & 15, nibbles >> 4], -1).transpose(1, 2).reshape(quads * 4, groups * GROUP)  # (N, K)
    d, mn = (s.float().transpose(1, 2).reshape(quads * 4, groups) for s in scales.split(4, -1))  # (N, G) each
    return q, d, mn


def dequantize_q4(packed: Tensor, scales: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The weight (N, K) in ``dtype``: q d + mn per group."""
    q, d, mn = unpack_q4(packed, scales)
    groups = q.to(dtype).view(q.size(0), -1, GROUP)  # (N, G, 32)
    return (groups * d.to(dtype)[..., None] + mn.to(dtype)[..., None]).view(q.shape)


def quantize_activations(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (M, K) float32 -> (p (M, G, 32) as float32 integers in [-127, 127], dx (M, G)): the kernel's Q8_1."""
    groups = x.view(x.size(0), -1, GROUP)  # (M, G, 32)
    dx = groups.abs().amax(-1) / 127  # (M, G)
    inverse = torch.where(dx > 0, 1 / dx, torch.zeros_like(dx))
    return (groups * inverse[..., None]).round(), dx  # round half to even, as the kernel's nearbyint


def reference_q4(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
    """What ``torch.ops.aiayn.q4a8_mm(x, packed, scales)`` computes, (M, K) -> (M, N) float32, in torch
    operations (float64 sums: the kernel's integer dots are exact, only its float sums round)."""
    q, d, mn = unpack_q4(packed, scales)
    p, dx = quantize_activations(x.float())
    dots = torch.einsum("mgj,ngj->mng", p.double(), q.double().view(q.size(0), -1, GROUP))  # (M, N, G)
    sums = p.double().sum(-1)  # (M, G)
    y = (dots * d.double() + sums[:, None, :] * mn.double()) * dx.double()[:, None, :]  # (M, N, G)
    return y.sum(-1).float()


def pack_q8(q: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """q (N, K) int8 in [-127, 127], d (N, K/32) -> (packed (N/4, G, 128) int8, scales (N/4, G, 4) float16)."""
    n, k = q.shape
    packed = q.view(n // 4, 4, k // GROUP, GROUP).transpose(1, 2).reshape(n // 4, k // GROUP, 4 * GROUP)
    return packed.contiguous(), d.half().view(n // 4, 4, k // GROUP).transpose(1, 2).contiguous()


def unpack_q8(packed: Tensor, scales: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`pack_q8` undone: (q (N, K) int8, d (N, G) float32)."""
    quads, groups = packed.shape[:2]
    q = packed.view(quads, groups, 4, GROUP).transpose(1, 2).reshape(quads * 4, groups * GROUP)  # (N, K)
    return q, scales.float().transpose(1, 2).reshape(quads * 4, groups)


def dequantize_q8(packed: Tensor, scales: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The weight (N, K) in ``dtype``: q d per group."""
    q, d = unpack_q8(packed, scales)
    return (q.to(dtype).view(q.size(0), -1, GROUP) * d.to(dtype)[..., None]).view(q.shape)


def reference_q8(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
    """What ``torch.ops.aiayn.q8a8_mm(x, packed, scales)`` computes, in torch operations (float64 sums)."""
    q, d = unpack_q8(packed, scales)
    p, dx = quantize_activations(x.float())
    dots = torch.einsum("mgj,ngj->mng", p.double(), q.double().view(q.size(0), -1, GROUP))  # (M, N, G)
    return (dots * d.double() * dx.double()[:, None, :]).sum(-1).float()


def register_fake() -> None:
    """The ops' output shapes for torch.compile's tracing (once, after the library is loaded)."""
    if getattr(register_fake, "done", False):
        return
    for name in ("aiayn::q4a8_mm", "aiayn::q8a8_mm"):
        torch.library.register_fake(name, lambda x, packed, scales: x.new_empty(x.size(0), packed.size(0) * 4))
    torch.library.register_fake("aiayn::f32_mm", lambda x, weight: x.new_empty(x.size(0), weight.size(0)))
    for name in ("aiayn::dequantize_q4", "aiayn::dequantize_q8"):
        torch.library.register_fake(name, lambda packed, scales, dtype: packed.new_empty(
            packed.size(0) * 4, packed.size(1) * GROUP, dtype=dtype))
    register_fake.done = True
