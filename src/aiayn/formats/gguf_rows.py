"""A GGUF tensor read a slice of rows at a time, and the blocks aiayn's int8 and int4 layers keep as they are.

llama.cpp stores a matrix row by row, each row in blocks of 32 weights (256 for the K-quants) with their scales.
aiayn's grouped layers (:class:`~aiayn.model.quantized.Int8Linear`, :class:`~aiayn.model.quantized.Int4Linear`)
keep w = q d (Q8_0) and w = q d + m per group of 32 (Q4_1): a file's Q8_0 blocks are int8 layers' groups, and its
Q4_0 (m = -8 d), Q4_1 and Q4_K (8 groups of 32 a block, d = d_block x scale, m = -dmin x min) blocks are int4
layers' groups. :class:`GGUFRows` hands them over (``grid``) so a layer is built from the file's own weights, with
no float32 round trip: Q8_0, Q4_0 and Q4_1 exactly; Q4_K with each group's scale and minimum rounded to float16,
as the layers keep them. It reads float32 rows too (the ``gguf`` package's dequantizer), for every other type and
use: the :class:`~aiayn.io.rows.Blocks` protocol that ``rows_of`` serves.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from aiayn.io.rows import Blocks

QK_K = 256  # weights in a K-quant block
Q4K_BYTES = 144  # d, dmin (float16), 12 bytes of 6-bit scales and minimums, 128 bytes of nibbles
GRIDS = {8: ("Q8_0",), 4: ("Q4_0", "Q4_1", "Q4_K")}  # the types whose blocks a layer of these bits keeps as they are


def gguf_package():
    """The ``gguf`` package (llama.cpp's own reader and writer), or a one-line hint to install it."""
    try:
        import gguf
    except ImportError:
        raise ValueError("GGUF files need the gguf package: pip install gguf") from None
    return gguf


def _halves(blocks: Tensor, start: int) -> Tensor:
    """The float16 at byte ``start`` of each block (..., bytes) as float32 (...)."""
    return blocks[..., start: start + 2].contiguous().view(torch.float16)[..., 0].float()


def _nibbles(qs: Tensor) -> Tensor:
    """16 bytes of a Q4_0 / Q4_1 block (..., 16) -> its 32 weights (..., 32): low nibbles first, then high ones."""
    return torch.cat([qs & 15, qs >> 4], -1)


def _q4_k_scales(scales: Tensor) -> tuple[Tensor, Tensor]:
    """A Q4_K block's 12 bytes (..., 12) -> the 6-bit scale and minimum of each of its 8 groups (..., 8) each."""
    low, high, rest = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]  # (..., 4) each
    sc = torch.cat([low & 63, (rest & 15) | ((low >> 6) << 4)], -1)
    mn = torch.cat([high & 63, (rest >> 4) | ((high >> 6) << 4)], -1)
    return sc.float(), mn.float()


def blocks_grid(kind: str, raw: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """Rows of a matrix as stored, ``raw`` (r, bytes a row) uint8, of type ``kind`` (Q8_0, Q4_0, Q4_1, Q4_K) and
    ``k`` weights a row -> (q (r, K): int8 for Q8_0, uint8 in [0, 15] else; d (r, K/32) float32; m (r, K/32)
    float32, None for Q8_0): w = q d + m per group of 32, the file's own values."""
    r, groups = raw.size(0), k // 32
    if kind == "Q8_0":
        blocks = raw.view(r, groups, 34)  # d (float16), 32 int8
        return blocks[..., 2:].contiguous().view(torch.int8).reshape(r, k), _halves(blocks, 0), None
    if kind == "Q4_0":
        blocks = raw.view(r, groups, 18)  # d, 16 bytes of nibbles; w = (q - 8) d
        d = _halves(blocks, 0)
        return _nibbles(blocks[..., 2:]).reshape(r, k), d, -8 * d
    if kind == "Q4_1":
        blocks = raw.view(r, groups, 20)  # d, m, 16 bytes of nibbles
        return _nibbles(blocks[..., 4:]).reshape(r, k), _halves(blocks, 0), _halves(blocks, 2)
    if kind == "Q4_K":
        blocks = raw.view(r, k // QK_K, Q4K_BYTES)
        sc, mn = _q4_k_scales(blocks[..., 4:16])  # (r, S, 8) each
        qs = blocks[..., 16:].reshape(r, -1, 4, 1, 32)  # (r, S, 4, 1, 32): 4 runs of 32 bytes, two groups each
        q = torch.cat([qs & 15, qs >> 4], 3).reshape(r, k)  # a run's low nibbles one group, its high the next
        d = (_halves(blocks, 0)[..., None] * sc).reshape(r, groups)  # (r, K/32)
        return q, d, (-(_halves(blocks, 2)[..., None] * mn)).reshape(r, groups)
    raise ValueError(f"blocks_grid: {kind} blocks are not kept as they are")


class GGUFRows(Blocks):
    """A GGUF file's tensor in PyTorch's shape, read a slice of rows at a time: ``rows[a:b]`` -> float32;
    ``grid(bits, a, b)`` -> the rows' blocks as a layer of ``bits`` keeps them (:func:`blocks_grid`), or None where
    the type is not one it keeps (:data:`GRIDS`). ``order``: the file's row of each row (a ``llama`` file's
    permuted queries and keys read back in Hugging Face's order)."""

    def __init__(self, tensor, path, order: Tensor | None = None) -> None:
        self.tensor, self.path, self.order = tensor, path, order
        self.kind = tensor.tensor_type.name
        self.shape = tuple(int(d) for d in reversed(tensor.shape))

    def _raw(self, rows: slice) -> np.ndarray:
        """The stored bytes (or values) of ``rows``, in this tensor's row order."""
        data = self.tensor.data
        return data[rows] if self.order is None else data[self.order[rows].numpy()]

    def __getitem__(self, rows: slice) -> Tensor:
        try:
            values = gguf_package().quants.dequantize(self._raw(rows), self.tensor.tensor_type)
        except NotImplementedError:
            raise ValueError(f"{self.path}: tensor {self.tensor.name} is of type {self.kind}, which the gguf package "
                             "cannot dequantize") from None
        return torch.from_numpy(np.array(values, dtype=np.float32)).reshape(-1, *self.shape[1:])  # (r, K)

    def grid(self, bits: int, start: int, stop: int) -> tuple[Tensor, Tensor, Tensor | None] | None:
        if self.kind not in GRIDS[bits]:
            return None
        raw = torch.from_numpy(np.array(self._raw(slice(start, stop))))  # (r, bytes a row), a copy
        return blocks_grid(self.kind, raw, self.shape[1])


class ZeroRows(Blocks):
    """``rows`` rows of ``width`` zeros, as a row source (a padding row appended to an imported token table)."""

    def __init__(self, rows: int, width: int) -> None:
        self.shape = (rows, width)

    def __getitem__(self, rows: slice) -> Tensor:
        return torch.zeros(len(range(*rows.indices(self.shape[0]))), self.shape[1])

    def grid(self, bits: int, start: int, stop: int) -> tuple[Tensor, Tensor, Tensor | None]:
        q = torch.zeros(stop - start, self.shape[1], dtype=torch.int8 if bits == 8 else torch.uint8)
        d = torch.zeros(stop - start, self.shape[1] // 32)
        return q, d, None if bits == 8 else d.clone()
