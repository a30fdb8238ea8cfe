"""Weights read a slice of rows at a time, never whole: the row sources a weight left unread points to (a
safetensors file's, a GGUF file's, several stacked), the protocols they declare, and reading what is left into place.
What a converter that quantizes rows as they come reads (``aiayn.inference.precision``). No torch at load time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor, nn

SLICE_BYTES = 16 * 2**20  # a stored tensor larger than this is read a slice of rows at a time (load_weights)


class RowSource(Protocol):
    """A matrix (N, K) read a slice of rows at a time, never whole: ``rows[a:b]`` -> those rows, float32. What a
    weight left unread points to (:func:`defer_rows`): a safetensors file's (:class:`StoredRows`), a GGUF file's
    (``formats/gguf_rows.py::GGUFRows``), several stacked (:class:`StackedRows`)."""

    shape: tuple[int, ...]

    def __getitem__(self, rows: slice) -> Tensor: ...


@runtime_checkable
class Blocks(Protocol):
    """A :class:`RowSource` whose rows a file stores as grouped quantized blocks: ``grid(bits, a, b)`` -> rows a:b as
    a layer of ``bits`` keeps them, (q, d, m) with w = q d + m per group of 32 (m None for int8), or None where its
    type is not one such a layer keeps (then the rows are quantized from their float32 values)."""

    shape: tuple[int, ...]

    def __getitem__(self, rows: slice) -> Tensor: ...

    def grid(self, bits: int, start: int, stop: int) -> tuple[Tensor, Tensor, Tensor | None] | None: ...


def defer_rows(tensor: Tensor, source: RowSource) -> None:
    """Leave ``tensor``'s values unread: a converter reads them from ``source`` (:func:`rows_of`), or
    :func:`read_deferred` copies them in."""
    tensor.stored_rows = source


def deferred_rows(tensor: Tensor) -> RowSource | None:
    """The :class:`RowSource` a tensor's values are still to be read from (:func:`defer_rows`), or None."""
    return getattr(tensor, "stored_rows", None)


class StoredRows:
    """A stored matrix read a slice of rows at a time, never whole: ``rows[a:b]`` -> those rows, float32, the file
    mapped anew for each slice. What a converter that quantizes rows as they come reads a large weight from
    (``rows_of``)."""

    def __init__(self, file: Path, name: str, shape: tuple[int, ...]) -> None:
        self.file, self.name, self.shape = file, name, shape

    def __getitem__(self, rows: slice):
        from safetensors import safe_open

        with safe_open(str(self.file), framework="pt") as stored:
            return stored.get_slice(self.name)[rows].float()


class StackedRows(Blocks):
    """Row sources of matrices one under the other (a fused projection's parts, ``stack_linears``): ``rows[a:b]``
    -> float32 rows from the parts that hold them; ``grid(bits, a, b)``: the parts' blocks stacked, where every part
    is :class:`Blocks` and has them, else None."""

    def __init__(self, parts: list[RowSource]) -> None:
        self.parts = parts
        self.shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])

    def _pieces(self, start: int, stop: int) -> list:
        """(part, its first row, its end) of each part that rows start:stop cover."""
        pieces, offset = [], 0
        for part in self.parts:
            a, b = max(start - offset, 0), min(stop - offset, part.shape[0])
            if a < b:
                pieces.append((part, a, b))
            offset += part.shape[0]
        return pieces

    def __getitem__(self, rows: slice):
        import torch

        start, stop, _ = rows.indices(self.shape[0])
        return torch.cat([part[a:b] for part, a, b in self._pieces(start, stop)])

    def grid(self, bits: int, start: int, stop: int):
        import torch

        pieces = self._pieces(start, stop)
        grids = [part.grid(bits, a, b) if isinstance(part, Blocks) else None for part, a, b in pieces]
        if not grids or any(g is None for g in grids):
            return None
        return tuple(None if t[0] is None else torch.cat(t) for t in zip(*grids, strict=True))


def read_deferred(module: nn.Module) -> None:
    """Read into place each of ``module``'s tensors still left unread (:func:`deferred_rows`: a :class:`StoredRows`, a
    GGUF file's rows), about ``SLICE_BYTES`` of rows at a time: what a converter that reads rows as it quantizes did
    not replace. Nothing is left unread whatever the converter made of it."""
    import torch

    with torch.no_grad():
        for tensor in module.state_dict(keep_vars=True).values():
            source = deferred_rows(tensor)
            if source is None:
                continue
            step = max(1, SLICE_BYTES * tensor.size(0) // (tensor.numel() * tensor.element_size()))
            for start in range(0, tensor.size(0), step):
                tensor[start: start + step].copy_(source[start: start + step])
            del tensor.stored_rows


def rows_of(weight):
    """A weight's rows as a converter reads them, a slice at a time: its :class:`StoredRows` where
    ``load_weights`` left it unread, else the tensor itself (detached)."""
    return deferred_rows(weight) or weight.detach()
