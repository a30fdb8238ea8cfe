"""The weights of ``aiayn::q4a8_mm`` (q4a8.cpp) and its math in torch operations.

Weights: w[n, 32 g + j] = q d[n, g] + mn[n, g], q in [0, 15] (llama.cpp's Q4_1; Q4_0 is mn = -8 d), kept as
``packed`` (N/4, G, 64) uint8, four rows at a time, each row's group as 16 bytes whose byte j holds weight j (low
nibble) and j + 16 (high), and ``scales`` (N/4, G, 8) float16, the four rows' d then their mn. Activations are
quantized per row and group of 32: p = round(x / dx), dx = max|x| / 127 (llama.cpp's Q8_1), so that
y[m, n] = sum_g d dx (q . p) + mn dx sum(p): integer dot products, one scale product a group.
"""

from __future__ import annotations

import torch
from torch import Tensor

GROUP = 32


def pack(q: Tensor, d: Tensor, mn: Tensor) -> tuple[Tensor, Tensor]:
    """q (N, K) uint8 in [0, 15], d and mn (N, K/32) -> (packed (N/4, G, 64) uint8, scales (N/4, G, 8) float16).
    N must be a multiple of 4 and K of 32."""
    n, k = q.shape
    groups = k // GROUP
    quads = q.view(n // 4, 4, groups, GROUP).transpose(1, 2)  # (N/4, G, 4, 32)
    packed = (quads[..., :16] | (quads[..., 16:] << 4)).reshape(n // 4, groups, 64)  # (N/4, G, 64)
    per_quad = [t.half().view(n // 4, 4, groups).transpose(1, 2) for t in (d, mn)]  # (N/4, G, 4) each
    return packed.contiguous(), torch.cat(per_quad, -1).contiguous()  # scales (N/4, G, 8)


def unpack(packed: Tensor, scales: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`pack` undone: (q (N, K) uint8, d (N, G) float32, mn (N, G) float32)."""
    quads, groups = packed.shape[:2]
    nibbles = packed.view(quads, groups, 4, 16)  # (N/4, G, 4, 16)
    q = torch.cat([nibbles & 15, nibbles >> 4], -1).transpose(1, 2).reshape(quads * 4, groups * GROUP)  # (N, K)
    d, mn = (s.float().transpose(1, 2).reshape(quads * 4, groups) for s in scales.split(4, -1))  # (N, G) each
    return q, d, mn


def dequantize(packed: Tensor, scales: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The weight (N, K) in ``dtype``: q d + mn per group."""
    q, d, mn = unpack(packed, scales)
    groups = q.to(dtype).view(q.size(0), -1, GROUP)  # (N, G, 32)
    return (groups * d.to(dtype)[..., None] + mn.to(dtype)[..., None]).view(q.shape)


def quantize_activations(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (M, K) float32 -> (p (M, G, 32) as float32 integers in [-127, 127], dx (M, G)): the kernel's Q8_1."""
    groups = x.view(x.size(0), -1, GROUP)  # (M, G, 32)
    dx = groups.abs().amax(-1) / 127  # (M, G)
    inverse = torch.where(dx > 0, 1 / dx, torch.zeros_like(dx))
    return (groups * inverse[..., None]).round(), dx  # round half to even, as the kernel's nearbyint


def reference(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
    """What ``torch.ops.aiayn.q4a8_mm(x, packed, scales)`` computes, (M, K) -> (M, N) float32, in torch
    operations (float64 sums: the kernel's integer dots are exact, only its float sums round)."""
    q, d, mn = unpack(packed, scales)
    p, dx = quantize_activations(x.float())
    dots = torch.einsum("mgj,ngj->mng", p.double(), q.double().view(q.size(0), -1, GROUP))  # (M, N, G)
    sums = p.double().sum(-1)  # (M, G)
    y = (dots * d.double() + sums[:, None, :] * mn.double()) * dx.double()[:, None, :]  # (M, N, G)
    return y.sum(-1).float()


def register_fake() -> None:
    """The op's output shape for torch.compile's tracing (once, after the library is loaded)."""
    if getattr(register_fake, "done", False):
        return

    @torch.library.register_fake("aiayn::q4a8_mm")
    def _(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
        return x.new_empty(x.size(0), packed.size(0) * 4)

    register_fake.done = True
