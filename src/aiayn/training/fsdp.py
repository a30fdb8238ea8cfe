"""Fully sharded data parallel (``--fsdp``): PyTorch's own FSDP2 (``fully_shard``) splits the parameters, their
gradients and Adam's two moments over the ranks, so each rank holds about 1/world of the training state where
DDP holds all of it on every rank.

Each encoder and decoder layer is one shard group (its weights are gathered just before it runs and freed after;
its gradients are reduce-scattered as soon as the backward pass leaves it); the embeddings, the output projection
and the final norms form the root group. Checkpoints are the ordinary ones: rank 0 receives the full weights and
the full optimizer state, in the very layout a one-process run writes, so a sharded run resumes sharded or not.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from aiayn.model.layers import DecoderLayer, EncoderLayer

FULL_ON_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered, on rank 0's CPU only


def shard(model: nn.Module, device: torch.device) -> None:
    """Shard ``model`` (on ``device``) in place over the process group: one group per layer, the rest in the
    root group. Every rank first takes rank 0's weights, as DDP does (a LoRA adapter's A is drawn on each rank).
    The mesh names the training device (FSDP's default would be the GPU wherever one exists)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor, src=0)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for module in model.modules():
        if isinstance(module, (EncoderLayer, DecoderLayer)):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


def local_share(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """What this rank holds: the model's parameters (elements), this rank's shard of them, and its optimizer
    state's elements (Adam's two moments of its shard; step counters left out)."""
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if isinstance(t, DTensor) else t

    moments = [t for state in optimizer.state.values() for t in state.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0]
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "rank_parameters": sum(local(p).numel() for p in model.parameters()),
            "rank_optimizer_elements": sum(local(t).numel() for t in moments)}


class PlainTwin:
    """Rank 0's unsharded twin of the model, which validates and is written as checkpoints: its parameters
    hold no storage while training and are filled with the gathered weights for an evaluation."""

    def __init__(self, model: nn.Module) -> None:
        """Made before sharding (a CPU copy, emptied at once)."""
        self.module = copy.deepcopy(model).to("cpu")
        self.shapes = {name: p.shape for name, p in self.module.named_parameters()}
        self.empty()

    def fill(self, state: dict) -> nn.Module:
        """The twin holding ``state`` (full weights), on the CPU. Parameters are refilled in place, so tied
        ones (the shared embedding and output projection) stay one tensor."""
        for name, p in self.module.named_parameters():
            p.data = torch.empty(self.shapes[name], dtype=p.dtype)
        self.module.load_state_dict(state)
        return self.module

    def empty(self) -> None:
        """Give the twin's parameter storage back until the next evaluation."""
        for p in self.module.parameters():
            p.data = torch.empty(0, dtype=p.dtype)


def gather(model: nn.Module, optimizer: torch.optim.Optimizer, twin: PlainTwin | None) -> tuple[nn.Module | None, dict]:
    """Every rank takes part: the full weights in rank 0's twin, and the full optimizer state (numbered as
    ``optimizer.state_dict()`` numbers it); the other ranks get (None, {})."""
    state = get_model_state_dict(model, options=FULL_ON_RANK0)
    plain = twin.fill(state) if twin is not None else None
    return plain, optimizer_state(model, optimizer)


def _names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the optimizer's order: index i of ``optimizer.state_dict()`` is ``names[i]``."""
    name_of = {id(p): name for name, p in model.named_parameters()}
    return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The full optimizer state on rank 0 ({} elsewhere), numbered as ``optimizer.state_dict()`` numbers it."""
    state = get_optimizer_state_dict(model, optimizer, options=FULL_ON_RANK0)
    if not state:
        return {}
    index = {name: i for i, name in enumerate(_names(model, optimizer))}
    return {"state": {index[name]: slots for name, slots in state["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Give each rank its shard of a full optimizer state (as ``optimizer.state_dict()`` numbers it)."""
    names = _names(model, optimizer)
    named = {"state": {names[i]: slots for i, slots in state["state"].items()},
             "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, named, options=StateDictOptions(full_state_dict=True))


@contextlib.contextmanager
def no_sync(model: nn.Module):
    """Within: backward passes keep their gradients local (accumulation); the window's last one reduces."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
