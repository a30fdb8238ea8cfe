"""Many LoRA adapters behind one model, in one batch (the gathered low-rank products of Punica and S-LoRA, written
small): each row of a batch runs its own adapter, h_b = W x_b + s_k B_k A_k x_b with k = the row's adapter, or
the base model alone (k = 0). The adapters stay unmerged: the base weights are shared, each adapter adds its A and
B (a few MB). Which adapter each row runs travels with the decoding state (``DecodeState.adapters``); the model's
``step`` hands it to its layers through one :class:`AdapterRows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from aiayn.model.lora import WrappedLinear


class AdapterRows:
    """The adapter of each row of the batch being computed, shared by every :class:`MultiLoRALinear` of a model:
    ``index`` (B,) long, 0 = the base model, k = the k-th adapter of ``names`` (1-based); None: all the base."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.index = list(names), None

    def number(self, name: str) -> int:
        """The index of adapter ``name`` (a ValueError naming those there are)."""
        if name not in self.names:
            raise ValueError(f"adapter: no adapter named {name!r}; this server has {', '.join(self.names)}")
        return self.names.index(name) + 1

    @contextmanager
    def rows(self, index: Tensor | None) -> Iterator[None]:
        """Compute with row b running adapter ``index[b]`` (None: the base model)."""
        before, self.index = self.index, index
        try:
            yield
        finally:
            self.index = before


class MultiLoRALinear(WrappedLinear):
    """``base`` plus each row's adapter update. Shape: (B, T, in) -> (B, T, out).

    Args:
        base: the shared linear layer.
        rows: which adapter each row runs (:class:`AdapterRows`).
        updates: per adapter, ``(A (r, in), B (out, r), scaling)``, or None where the adapter leaves this layer
            alone. Stacked as A (N+1, R, in) and scaling * B (N+1, out, R), R the largest rank (smaller ones
            padded with zeros, which add nothing); slot 0 is all zeros, the base.
    """

    def __init__(self, base: nn.Module, rows: AdapterRows, updates: list[tuple[Tensor, Tensor, float] | None]) -> None:
        super().__init__()
        self.base, self.rows = base, rows
        like = base.weight
        rank = max(a.size(0) for a, _, _ in (u for u in updates if u is not None))
        a_all = torch.zeros(len(updates) + 1, rank, base.in_features, dtype=like.dtype, device=like.device)
        b_all = torch.zeros(len(updates) + 1, base.out_features, rank, dtype=like.dtype, device=like.device)
        for k, update in enumerate(updates, start=1):
            if update is not None:
                a, b, scaling = update
                a_all[k, : a.size(0)] = a
                b_all[k, :, : b.size(1)] = b * scaling
        self.register_buffer("lora_A", a_all)  # (N+1, R, in)
        self.register_buffer("lora_B", b_all)  # (N+1, out, R)

    def forward(self, x: Tensor) -> Tensor:
        out = self.base(x)
        index = self.rows.index
        if index is None:
            return out
        a = self.lora_A.index_select(0, index)  # (B, R, in): each row's A
        b = self.lora_B.index_select(0, index)  # (B, out, R): each row's scaled B
        low = torch.einsum("bti,bri->btr", x.to(a.dtype), a)  # (B, T, R)
        return out + torch.einsum("btr,bor->bto", low, b).to(out.dtype)  # (B, T, out)


def attach_adapters(model: nn.Module, adapters: dict[str, dict[str, tuple[Tensor, Tensor, float]]]) -> AdapterRows:
    """Put ``adapters`` (name -> layer path -> (A, B, scaling), as :func:`aiayn.interop.peft.read_adapter` gives
    them) on ``model``, in place: every layer one of them adapts becomes a :class:`MultiLoRALinear`; the model's
    ``runtime.adapter_rows`` says which adapter each row runs. Returns it."""
    rows = AdapterRows(list(adapters))
    paths = sorted({path for layers in adapters.values() for path in layers})
    for path in paths:
        parent_path, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        updates = [layers.get(path) for layers in adapters.values()]
        setattr(parent, attr, MultiLoRALinear(getattr(parent, attr), rows, updates))
    model.runtime.adapter_rows = rows
    return rows
