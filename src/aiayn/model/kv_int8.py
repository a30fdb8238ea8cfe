"""The int8 KV cache (``--kv-cache-dtype int8``): keys and values kept as int8, one float32 scale a group of 32.

A key (or value) vector of one head at one position is kept a group of 32 values x at a time as round(x / s) in
[-127, 127] with s = max|x| / 127 (llama.cpp's ``-ctk q8_0`` layout; a head of fewer or other than a multiple of 32
values is one group): 36 bytes a group against float32's 128 (0.28x). With one scale a whole head's vector, Gemma 3
270M's 256-wide heads kept the float cache's greedy text on one prompt of four, groups of 32 on three
(``benchmarks/bench_kv_cache.py``, docs/decoding.md).

:class:`Int8Rows` stands where the cache's float tensor (B, H, capacity, D) stands in ``model/kv_cache.py``'s
:class:`~aiayn.model.kv_cache.KVCache`: indexed, assigned (a float assigned is quantized), reordered and assembled the
same way, so rings, rows joining a batch and speculative roll-back need nothing of their own. Attention reads it
through :func:`int8_attention`: aiayn's kernel (``kernels/attention.cpp``), which reads the int8 rows as they lie;
where that does not apply, attention over the rows dequantized (``model/attention.py``; also what the kernel is
tested against).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

LEVELS = 127  # int8 values in [-127, 127]: symmetric, so that 0 is exact
GROUP = 32  # values a scale


def group_of(d: int) -> int:
    """The values a scale in a head of ``d``: :data:`GROUP`, or ``d`` where 32 does not divide it."""
    return GROUP if d % GROUP == 0 else d


@dataclass
class Int8Rows:
    """(B, H, S, D) keys or values as ``data`` int8 (B, H, S, D) times ``scale`` float32 (B, H, S, D / group), each
    scale its group's (:func:`group_of`).

    Indexing keeps the two together (an index never reaches D); assigning a float tensor quantizes it, an
    :class:`Int8Rows` is copied, a number (0) zeroes both."""

    data: Tensor
    scale: Tensor

    @classmethod
    def allocate(cls, shape: tuple[int, ...], device, zeros: bool = False) -> Int8Rows:
        new = torch.zeros if zeros else torch.empty
        groups = shape[-1] // group_of(shape[-1])
        return cls(new(shape, dtype=torch.int8, device=device), new((*shape[:-1], groups), device=device))

    @classmethod
    def quantize(cls, x: Tensor) -> Int8Rows:
        """x (..., D) float -> its int8 rows: round(x / s), s = max|x| / 127 a group (an all-zero group: s = 0)."""
        groups = x.float().unflatten(-1, (-1, group_of(x.size(-1))))  # (..., D / group, group)
        scale = groups.abs().amax(dim=-1, keepdim=True) / LEVELS  # (..., D / group, 1)
        data = (groups / scale.masked_fill(scale == 0, 1)).round_().clamp_(-LEVELS, LEVELS).to(torch.int8)
        return cls(data.flatten(-2), scale.squeeze(-1))  # (..., D), (..., D / group)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> Tensor:
        groups = self.data.unflatten(-1, (self.scale.size(-1), -1)).to(dtype)  # (B, H, S, D / group, group)
        return (groups * self.scale.to(dtype)[..., None]).flatten(-2)  # (B, H, S, D)

    @property
    def device(self) -> torch.device:
        return self.data.device

    def size(self, dim: int | None = None):
        return self.data.size() if dim is None else self.data.size(dim)

    def __getitem__(self, index) -> Int8Rows:
        return Int8Rows(self.data[index], self.scale[index])

    def __setitem__(self, index, value) -> None:
        if isinstance(value, Tensor):
            value = Int8Rows.quantize(value)
        if isinstance(value, Int8Rows):
            self.data[index], self.scale[index] = value.data, value.scale
        else:  # a number: only 0 is meant (padding, slots not written yet)
            self.data[index], self.scale[index] = int(value), float(value)

    def index_select(self, dim: int, index: Tensor) -> Int8Rows:
        return Int8Rows(self.data.index_select(dim, index), self.scale.index_select(dim, index))

    def new_empty(self, shape: tuple[int, ...]) -> Int8Rows:
        return Int8Rows.allocate(tuple(shape), self.device)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scale.nbytes


def cache_dtype(name: str | None) -> torch.dtype | None:
    """``--kv-cache-dtype`` (the library's ``kv_cache_dtype``) as the models' runtime keeps it: ``int8`` ->
    torch.int8; None or ``auto`` -> None (the weights' dtype: float32, or bfloat16 with ``--bf16``)."""
    if name in (None, "auto"):
        return None
    if name != "int8":
        raise ValueError(f"kv_cache_dtype: int8 or auto (the weights' dtype), not {name!r}")
    return torch.int8


def dense(t: Tensor | Int8Rows, dtype: torch.dtype = torch.float32) -> Tensor:
    """``t`` as a float tensor: int8 rows dequantized, a tensor as it is."""
    return t.dequantize(dtype) if isinstance(t, Int8Rows) else t


FEW_QUERIES = 16  # the kernel takes up to this many queries a row (decoding steps, verifying passes)


def int8_attention(q: Tensor, k: Int8Rows, v: Int8Rows, mask: Tensor | None) -> Tensor | None:
    """softmax(Q K^T / sqrt(d_k)) V read from the int8 rows as they lie (``aiayn::int8_attention``): q (B, H, T, D),
    mask bool (True = may attend) (B or 1, 1, T or 1, S) or None -> (B, H, T, D). For a few queries a row (a decoding
    step: the cache read once, a quarter of float32's bytes) where the kernels are built; None elsewhere, and the
    caller attends over the rows dequantized (``MultiHeadAttention.attend``, the reference the kernel is tested
    against): a prompt's many queries are PyTorch's attention's work, against which writing the rows out once is
    small."""
    from aiayn.kernels import load

    if (q.device.type != "cpu" or q.size(2) > FEW_QUERIES or (mask is not None and (mask.dim() != 4
                                                                                  or mask.size(1) != 1))
            or load() is not None):
        return None
    b, _, t, _ = q.shape
    rows = None if mask is None else mask[:, 0].expand(b, t, k.size(2))  # (B, T, S)
    out = torch.ops.aiayn.int8_attention(q.float(), k.data, k.scale, v.data, v.scale, rows)  # (B, H, T, D)
    return out.to(q.dtype)
