"""all_sum under gloo: the sum, and no reference to its tensor left with gloo's worker thread when it returns
(the cause of a hang at exit: the worker freeing that reference needs the GIL the exiting main thread holds)."""

import sys

import pytest
import torch.distributed as dist

from aiayn.training import distributed
from aiayn.training.distributed import DistInfo, all_sum


@pytest.fixture
def gloo(tmp_path):
    """A one-process gloo group, described as two processes so that all_sum takes its collective path."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield DistInfo(rank=0, world=2)
    dist.destroy_process_group()


def test_all_sum_returns_once_gloo_has_let_go_of_its_tensor(gloo):
    for step in range(500):
        assert all_sum(float(step), gloo) == float(step)
        held = sys.getrefcount(distributed._SUM_BUFFERS["cpu"])  # outside the assert: pytest's rewriting holds one
        assert held == 2, step  # the dict's reference and getrefcount's argument


def test_all_sum_of_one_process_is_the_value():
    assert all_sum(2.5, DistInfo()) == 2.5
