"""How a run spreads over processes, chosen once (Lightning's ``Strategy``): one process (``Plain``), a copy of
the model on every rank with gradients all-reduced (``DDP``, PyTorch's DistributedDataParallel), or the training
state sharded over the ranks (``FSDP``, ``training/fsdp.py``). The trainer asks its strategy, never the recipe:
how to wrap the model, how to accumulate without syncing, how to gather the full weights and optimizer state for
a checkpoint, and how to load an optimizer state back."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from aiayn.training import fsdp
from aiayn.training.distributed import DistInfo


class Plain:
    """One process: the model as it is."""

    def __init__(self, dist: DistInfo) -> None:
        self.dist = dist

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """Move ``model`` to ``device``; the module the loss runs through (the model, or its wrapper)."""
        return model.to(device)

    def no_sync(self, net: nn.Module):
        """Within: a backward pass that keeps its gradients local (all but the last of an accumulation window)."""
        return contextlib.nullcontext()

    def gather(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[nn.Module, dict]:
        """The plain model that validates and is written (rank 0's), and the full optimizer state."""
        return model, optimizer.state_dict()

    def load_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    def report(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
        """What the first step's log adds about the strategy (None: nothing)."""
        return None

    def saved(self) -> None:
        """Told after each checkpoint is written."""


class DDP(Plain):
    """A copy of the model on every rank; each window's gradients all-reduced once, at its last backward."""

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        return DistributedDataParallel(super().wrap(model, device))

    def no_sync(self, net: DistributedDataParallel):
        return net.no_sync()


class FSDP(Plain):
    """The parameters, gradients and Adam's moments sharded over the ranks; rank 0 keeps an empty plain twin that
    the full weights fill for validation and checkpoints."""

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        self.twin = fsdp.PlainTwin(model) if self.dist.main else None  # made before sharding
        model.to(device)
        fsdp.shard(model, device)
        return model

    def no_sync(self, net: nn.Module):
        return fsdp.no_sync(net)

    def gather(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[nn.Module | None, dict]:
        return fsdp.gather(model, optimizer, self.twin)

    def load_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        fsdp.load_optimizer_state(model, optimizer, state)

    def report(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        return {"fsdp_rank0": fsdp.local_share(model, optimizer)}

    def saved(self) -> None:
        if self.twin is not None:
            self.twin.empty()  # its storage back until the next evaluation


def choose(fsdp_asked: bool, dist: DistInfo) -> Plain:
    """The strategy of a run: FSDP when the recipe asks (under torchrun), DDP under torchrun, else plain."""
    if fsdp_asked and not dist.enabled:
        raise ValueError("fsdp: shards over several processes: start with torchrun --nproc-per-node N")
    return FSDP(dist) if fsdp_asked else DDP(dist) if dist.enabled else Plain(dist)
