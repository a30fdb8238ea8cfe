"""How PyTorch's CPU int4 kernel packs a weight (``_convert_weight_to_int4pack_for_cpu``), read back: an
:class:`~aiayn.model.quantized.Int4Linear` on that kernel dequantizes its weight (a prompt's product) from the
packed bytes alone where one of these layouts reads them, rather than keeping a second copy."""

from __future__ import annotations

import torch
from torch import Tensor

# How _convert_weight_to_int4pack_for_cpu lays out its bytes: (rows a block, whether a whole block's byte holds
# rows c and c + block/2, as with AVX512 (64) and AVX2 (32); else rows 2j and 2j + 1, as without either and in a
# last, partial block). Each is checked against the weights it packs (layouts_of), so a kernel that packs otherwise
# costs memory (a second copy), never results.
LAYOUTS = ((64, True), (32, True), (32, False), (64, False))


def unpack_int4(packed: Tensor, k: int, layout: tuple[int, bool]) -> Tensor:
    """The int4 kernel's packing (N', K/2) undone for ``layout`` (:data:`LAYOUTS`): q (N', K) uint8. A block of
    rows lies after the one before it, K x rows/2 bytes, k-major; a last, partial block pairs rows 2j, 2j + 1."""
    block, halves = layout
    n, flat, parts = packed.size(0), packed.reshape(-1), []
    whole = n // block * block
    if whole:
        parts.append(_block_rows(flat[: whole * k // 2].view(whole // block, k, block // 2), halves))
    if whole < n:
        parts.append(_block_rows(flat[whole * k // 2:].view(1, k, (n - whole) // 2), False))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def _block_rows(blocks: Tensor, halves: bool) -> Tensor:
    """Bytes (blocks, K, r/2) of the kernel's blocks -> their rows of weights (blocks x r, K)."""
    low, high = blocks & 15, blocks >> 4  # (blocks, K, r/2) each
    q = torch.cat([low, high], -1) if halves else torch.stack([low, high], -1).flatten(-2)  # (blocks, K, r)
    return q.transpose(1, 2).flatten(0, 1)  # (blocks x r, K)


def layouts_of(packed: Tensor, q: Tensor, layouts=LAYOUTS) -> set[tuple[int, bool]]:
    """Those of ``layouts`` that read ``q`` (r, K) back from the kernel's ``packed`` (a few rows: several)."""
    return {layout for layout in layouts if torch.equal(unpack_int4(packed, q.size(1), layout), q)}
