"""LoRA (Hu et al. 2021, "Low-Rank Adaptation"): a frozen linear layer plus a trainable low-rank update,
h = W x + b + (alpha / r) B A dropout(x), A (r, in) and B (out, r). B starts at zero, so the adapted model
equals the base model until it trains. Only A and B train: a few MB, saved as an adapter (PEFT's format:
``aiayn.interop.peft``), merged back into W for serving at the base model's speed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.model.dropout import Dropout

# Which linear layers a target name adapts, by their attribute name in aiayn's modules.
TARGETS = {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("out_proj",),
           "ffn": ("linear1", "linear2", "gate_proj", "up_proj", "down_proj")}


class WrappedLinear(nn.Module):
    """A linear layer ``base`` with something added to its output: it reads as its base (sizes, weight)."""

    base: nn.Module

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self) -> Tensor:
        """The frozen base weight (code that reads a linear's weight, such as a tied output, reads W)."""
        return self.base.weight


class LoRALinear(WrappedLinear):
    """``base`` (frozen) plus (alpha / r) B A dropout(x). Shape: (..., in_features) -> (..., out_features).

    Args:
        base: the pretrained linear layer; its weight and bias stop training.
        r: the rank of the update; alpha: its scale numerator (scaling = alpha / r); dropout: on the
            update's input only (PEFT's ``lora_dropout``).
    """

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
        super().__init__()
        if r <= 0:
            raise ValueError(f"lora_r: must be a positive integer, got {r!r}")
        self.base = base
        for param in base.parameters():
            param.requires_grad_(False)
        self.lora_A = nn.Linear(base.in_features, r, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, device=base.weight.device,
                                dtype=base.weight.dtype)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))  # PEFT's default for A
        nn.init.zeros_(self.lora_B.weight)
        self.r, self.alpha, self.scaling = r, alpha, alpha / r
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling

    def delta(self) -> Tensor:
        """The update as a matrix: (alpha / r) B A, (out, in)."""
        return (self.lora_B.weight @ self.lora_A.weight) * self.scaling

    def merged(self) -> nn.Linear:
        """A plain linear layer computing the same function: W + (alpha / r) B A, the base bias."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.base.bias is not None,
                        device=self.base.weight.device, dtype=self.base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.base.weight + self.delta().to(self.base.weight.dtype))
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out


def target_names(targets: str | list[str]) -> set[str]:
    """Attribute names of the linear layers ``targets`` (comma-separated q, k, v, o, ffn) adapt."""
    parts = [t.strip() for t in targets.split(",")] if isinstance(targets, str) else list(targets)
    unknown = [t for t in parts if t not in TARGETS]
    if unknown or not parts:
        raise ValueError(f"lora_targets: unknown {', '.join(unknown) or 'empty list'}; choose from "
                         f"{', '.join(TARGETS)}")
    return {name for t in parts for name in TARGETS[t]}


def apply_lora(model: nn.Module, r: int, alpha: float, targets: str | list[str] = "q,k,v,o",
               dropout: float = 0.0) -> list[str]:
    """Wrap every targeted linear layer of ``model`` in a :class:`LoRALinear` and freeze everything else;
    returns the wrapped layers' names. The model's parameters are then the base (frozen) and the adapters."""
    names = target_names(targets)
    for param in model.parameters():
        param.requires_grad_(False)
    wrapped = []
    for path, module in list(model.named_modules()):
        for attr, child in list(module.named_children()):  # the module's own order, not a set's: each A's random
            if attr in names and type(child) is nn.Linear:  # draw is the same in every process (PYTHONHASHSEED)
                setattr(module, attr, LoRALinear(child, r, alpha, dropout))
                wrapped.append(f"{path}.{attr}" if path else attr)
    if not wrapped:
        raise ValueError(f"lora_targets: the model has no {', '.join(sorted(names))} layers to adapt")
    return wrapped


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Every adapted layer by its module path."""
    return {path: m for path, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """The adapter's tensors: ``PATH.lora_A.weight`` (r, in) and ``PATH.lora_B.weight`` (out, r) per layer."""
    out = {}
    for path, layer in lora_layers(model).items():
        out[f"{path}.lora_A.weight"] = layer.lora_A.weight.detach()
        out[f"{path}.lora_B.weight"] = layer.lora_B.weight.detach()
    return out


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight, in place: the model is plain again (and as fast as the base)."""
    for path, layer in lora_layers(model).items():
        parent_path, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, attr, layer.merged())
    return model
