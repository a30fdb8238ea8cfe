"""Several processes under torchrun (DDP): rank 0 alone logs and writes checkpoints; SIGTERM (torchrun, a
scheduler) becomes a flag every process checks."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def setup(device: torch.device) -> DistInfo:
    """Join the process group torchrun describes in the environment (gloo on CPU, nccl on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if not restart:
            dist.init_process_group(backend)
        else:  # torchrun's store outlives a restart: a prefix per attempt keeps the dead group's addresses away
            from torch.distributed.rendezvous import rendezvous

            store, rank, size = next(rendezvous("env://"))
            dist.init_process_group(backend, store=dist.PrefixStore(f"aiayn/restart_{restart}", store), rank=rank,
                                    world_size=size)
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def start(device: torch.device) -> tuple[DistInfo, torch.device]:
    """This process's place in torchrun's group (joined here; one process: the default) and its device."""
    info = setup(device)
    return info, rank_device(device, info)


def rank_device(device: torch.device, info: DistInfo) -> torch.device:
    """The device this process trains on: under torchrun on CUDA, the GPU of its local rank (``cuda:LOCAL_RANK``,
    made current), so that N processes on a machine use its N GPUs; otherwise ``device`` unchanged."""
    if device.type != "cuda" or not info.enabled or device.index is not None:
        return device
    device = torch.device("cuda", info.local_rank)
    if torch.cuda.is_available():
        torch.cuda.set_device(device)
    return device


def rank_share(batches: Iterable[list[int]], info: DistInfo) -> Iterator[list[int]]:
    """This process's batches: of every ``world`` consecutive batches, the rank-th (an incomplete last group is
    dropped, so every rank gets as many). Lazy: a sharded corpus is never listed whole."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == info.world:
            yield group[info.rank]
            group = []


# One buffer per device, alive as long as the process. Gloo's worker thread lets go of a collective's tensor
# after the caller has moved on, and letting go of a tensor made in Python takes the GIL. Were that the
# tensor's last owner at interpreter exit, the process would abort ("terminate called without an active
# exception"); see also _all_reduce_and_release.
_SUM_BUFFERS: dict[str, torch.Tensor] = {}
RELEASE_TIMEOUT_S = 10.0


def all_sum(value: float, info: DistInfo, device: torch.device | None = None) -> float:
    """Sum a number over all processes (identity for one process)."""
    if not info.enabled:
        return value
    key = str(device or "cpu")
    if key not in _SUM_BUFFERS:
        _SUM_BUFFERS[key] = torch.zeros(1, dtype=torch.float64, device=device)
    buffer = _SUM_BUFFERS[key]
    buffer.fill_(value)
    _all_reduce_and_release(buffer)
    return float(buffer.item())


def _all_reduce_and_release(buffer: torch.Tensor) -> None:
    """All-reduce, then on the CPU (gloo) sleep, the GIL free, until gloo's worker thread has dropped its
    reference to ``buffer`` (a C++ reference to a Python tensor counts in the tensor's refcount). Otherwise the
    barrier of ``teardown`` can take over the finished all-reduce, and the worker frees it, needing the GIL,
    while the main thread holds the GIL to join that worker in the process group's destructor: a hang at exit,
    seen about once in 100 runs under load."""
    held = sys.getrefcount(buffer)
    dist.all_reduce(buffer)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while buffer.device.type == "cpu" and sys.getrefcount(buffer) > held and time.monotonic() < deadline:
        time.sleep(0.0002)


def teardown(info: DistInfo) -> None:
    """Leave the process group once every process has finished its last collective."""
    if info.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def sigterm_flag():
    """Within: SIGTERM (a scheduler's preemption, ``kill``) sets the yielded event instead of killing the
    process, so the loop can save after the current step. Only the main thread can take signals."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)
