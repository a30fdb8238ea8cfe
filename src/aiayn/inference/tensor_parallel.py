"""Tensor-parallel inference: every attention and feed-forward block split over the processes of ``torchrun``
(Megatron-LM's split, Shoeybi et al. 2019), through PyTorch's tensor parallel API.

Each block's first projections are split by output columns (``ColwiseParallel``: the query, key and value
projections, a head's columns all on one rank; the feed-forward's first layer, or SwiGLU's gate and up), its last
by input rows (``RowwiseParallel``: the attention's output projection, the feed-forward's second layer), so a
block reads the whole residual stream, works on its own heads and hidden units, and one all-reduce per block
sums the parts. Every rank thus holds 1/N of each block's weights and of the KV cache (its own key/value heads);
the embeddings, norms and output projection are whole on every rank. T5's relative position bias keeps its own
heads' columns.

Every rank runs the same program on the same inputs: rank 0 reads the input and writes the output (the others
are silent), inputs and the random seed are shared from it (:meth:`Parallel.share`); the server's engine steps are
sent from rank 0 to the others (``serve/mirror.py``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
from torch import nn

from aiayn.model.config import ModelConfig
from aiayn.model.transformer import TransformerModel

LAUNCH = "run it under torchrun: torchrun --nproc-per-node N -m aiayn ... --tensor-parallel"


@dataclass
class Parallel:
    """This process's place among the tensor-parallel ones."""

    rank: int
    world: int
    mesh: object  # torch.distributed.device_mesh.DeviceMesh
    device: torch.device

    @property
    def leader(self) -> bool:
        """Rank 0: reads the input, writes the output, serves HTTP."""
        return self.rank == 0

    def share(self, value):
        """``value`` as rank 0 has it, on every rank (any picklable object, sent over the process group)."""
        import torch.distributed as dist

        box = [value if self.leader else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def on_leader(self, read):
        """``read()`` on rank 0 alone (reading the input), its value or its error on every rank: an input rank 0
        cannot read stops every rank with the same message instead of leaving them waiting."""
        outcome = None
        if self.leader:
            try:
                outcome = (True, read())
            except (ValueError, OSError) as err:
                outcome = (False, err)
        ok, value = self.share(outcome)
        if not ok:
            raise value
        return value

    def prepare(self, model: TransformerModel) -> TransformerModel:
        """The ``load_checkpoint(prepare=...)`` hook: ``model`` moved to this rank's device and split."""
        return parallelize(model.to(self.device), self.mesh)


def start(device: str = "cpu") -> Parallel:
    """Join the process group that ``torchrun`` set up (gloo on the CPU, NCCL on CUDA, one GPU per rank), share one
    random seed (sampling draws the same tokens on every rank) and silence the standard output of ranks but 0."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ValueError(f"--tensor-parallel: no process group to join; {LAUNCH}")
    cuda = torch.device(device).type == "cuda"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        if local >= torch.cuda.device_count():
            raise ValueError(f"--tensor-parallel: rank {local} has no GPU of its own ({torch.cuda.device_count()} "
                             "found); start at most one process per GPU")
        torch.cuda.set_device(local)
    if not dist.is_initialized():  # a server's other ranks wait for rank 0's next call as long as it idles
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(days=365))
    world = dist.get_world_size()
    here = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    parallel = Parallel(dist.get_rank(), world, init_device_mesh(here.type, (world,)), here)
    torch.manual_seed(parallel.share(int(torch.randint(0, 2**62, ()).item())))
    if not parallel.leader:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    return parallel


def check_divisible(cfg: ModelConfig, world: int) -> None:
    """Heads, key/value heads and feed-forward units must divide over the ranks: else a ValueError naming them."""
    for name, value in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.kv_heads), ("d_ff", cfg.d_ff)):
        if value % world:
            raise ValueError(f"--tensor-parallel: {name} = {value} does not divide over {world} processes; "
                             f"start a number of processes that divides it")


def _block_plan(layer: nn.Module, world: int) -> dict:
    """The ``parallelize_module`` plan of one encoder or decoder layer; its attention modules told their heads."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for name in ("self_attn", "cross_attn"):
        attn = getattr(layer, name, None)
        if attn is None:
            continue
        if attn.qkv_proj is not None or type(attn.q_proj) is not nn.Linear:
            raise ValueError("--tensor-parallel: the model's projections are fused, packed or adapted; split the "
                             "plain model (no --adapter, --int8, --int4)")
        plan |= {f"{name}.{p}": ColwiseParallel() for p in ("q_proj", "k_proj", "v_proj")}
        plan[f"{name}.out_proj"] = RowwiseParallel()
        attn.n_heads, attn.n_kv_heads = attn.n_heads // world, attn.n_kv_heads // world  # this rank's heads
    if hasattr(layer.ffn, "router"):
        pass  # a mixture of experts is replicated: every rank runs every expert on the all-reduced activations
    elif hasattr(layer.ffn, "gate_proj"):
        plan |= {"ffn.gate_proj": ColwiseParallel(), "ffn.up_proj": ColwiseParallel(),
                 "ffn.down_proj": RowwiseParallel()}
    else:
        plan |= {"ffn.linear1": ColwiseParallel(), "ffn.linear2": RowwiseParallel()}
    return plan


def parallelize(model: TransformerModel, mesh) -> TransformerModel:
    """Split ``model``'s attention and feed-forward blocks over ``mesh`` (a 1-D device mesh), in place."""
    from torch.distributed.tensor.parallel import parallelize_module

    world, rank = mesh.size(), mesh.get_local_rank()
    check_divisible(model.config, world)
    for stack in (getattr(model, "encoder", None), getattr(model, "decoder", None)):
        if stack is None:
            continue
        for layer in stack.layers:
            parallelize_module(layer, mesh, _block_plan(layer, world))
        if stack.position_bias is not None:  # (buckets, H): this rank's heads' columns
            table = stack.position_bias.table
            per = table.weight.size(1) // world
            table.weight = nn.Parameter(table.weight.detach()[:, rank * per:(rank + 1) * per].clone())
    model.runtime.world = world
    return model.eval()


def is_parallel(model: nn.Module) -> bool:
    """Whether ``model`` was split by :func:`parallelize`."""
    return model.runtime.world > 1


def local_bytes(model: nn.Module) -> int:
    """Bytes of the parameters this rank holds (a split weight's local shard only)."""
    total = 0
    for param in model.parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        total += local.numel() * local.element_size()
    return total
