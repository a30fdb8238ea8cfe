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
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

from aiayn.model.layers import DecoderLayer, EncoderLayer

FULL_ON_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered, on rank 0's CPU only


def shard(model: nn.Module) -> None:
    """Shard ``model`` in place over the process group: one group per layer, the rest in the root group."""
    for module in model.modules():
        if isinstance(module, (EncoderLayer, DecoderLayer)):
            fully_shard(module)
    fully_shard(model)


def plain_copy(model: nn.Module, main: bool) -> nn.Module | None:
    """Before sharding: rank 0's unsharded twin on the CPU, which validates and is written as checkpoints."""
    return copy.deepcopy(model).to("cpu") if main else None


def refresh(plain: nn.Module | None, model: nn.Module) -> None:
    """Gather the sharded weights (every rank takes part) into rank 0's twin."""
    state = get_model_state_dict(model, options=FULL_ON_RANK0)
    if plain is not None:
        plain.load_state_dict(state)


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
