"""The tensor-parallel server's mirrored engine (``serve/mirror.py``) in one process: rank 0's engine sends each call
that computes, a follower replays it, and both engines run the same batches step by step (whole weights on both,
so the follower's scores equal rank 0's); groups that join, leave mid-run and fail a step are mirrored, and
``stop`` ends the follower. The collectives are a queue here; the processes are tested in
``tests/inference/test_tensor_parallel.py``."""

import copy
import logging
import queue
import threading
from types import SimpleNamespace

import pytest
import torch

from aiayn import DecoderOnly
from aiayn.decoding.greedy import TokenRows
from aiayn.serve.mirror import follow, lead

from conftest import tiny


class Channel:
    """rank 0's ``share(message)`` puts it on a queue and returns it; a follower's ``share(None)`` takes the next."""

    def __init__(self, leader: bool) -> None:
        self.leader, self.sent = leader, queue.Queue()

    def share(self, message):
        if self.leader:
            self.sent.put(message)
            return message
        return self.sent.get(timeout=30)


class Recorded(DecoderOnly):
    """A decoder-only model that records every step's scores (B, V)."""

    def step(self, *args, **kwargs):
        out = super().step(*args, **kwargs)
        self.seen.append(out[:, -1].detach().clone())
        return out


def engines():
    torch.manual_seed(0)
    model = Recorded(tiny(arch="decoder-only", vocab_size=40)).eval()
    model.seen = []
    mirror = copy.deepcopy(model)
    mirror.seen = []
    to_follower, from_leader = Channel(True), Channel(False)
    from_leader.sent = to_follower.sent
    scheduler = SimpleNamespace(model=model, capacity=64, prefix_cache=None, encode=None)
    engine = lead(scheduler, to_follower)
    standing = SimpleNamespace(model=mirror, capacity=64, prefix_cache=None, encode=None)
    follower = threading.Thread(target=follow, args=(standing, from_leader), daemon=True)
    follower.start()
    return engine, model, mirror, follower


def rows(n: int, limit: int, pick=None) -> TokenRows:
    return TokenRows(torch.full((n,), limit), pick or (lambda s: s.argmax(-1)), eos_id=2, pad_id=0)


def test_a_follower_runs_the_same_batches_as_rank_0_as_groups_join_and_leave():
    engine, model, mirror, follower = engines()
    gen = torch.Generator().manual_seed(1)
    first, second = rows(2, 12), rows(1, 2, lambda s: torch.multinomial(s.softmax(-1), 1, generator=gen)[:, 0])
    with torch.no_grad():
        engine.admit(first, torch.randint(4, 40, (2, 5)))
        engine.step()
        engine.step()
        engine.admit(second, torch.randint(4, 40, (1, 3)))  # joins the running batch, sampled
        while engine.groups or engine.joining:
            engine.step()
            engine.remove_done()
            if first.steps == 7:
                first.cancel()  # a client went away: its rows leave mid-run, after the second group left
        engine.stop()
    follower.join(timeout=30)
    assert not follower.is_alive(), "stop did not end the follower"
    assert first.reasons == ["cancelled", "cancelled"] and second.done
    assert len(model.seen) == len(mirror.seen) >= 6
    assert [s.shape for s in model.seen] == [s.shape for s in mirror.seen]  # the same rows at every step
    sizes = [s.size(0) for s in model.seen]
    assert 3 in sizes and 2 in sizes[sizes.index(3):], sizes  # three rows together, then two once one left
    for ours, theirs in zip(model.seen, mirror.seen, strict=True):  # the same tokens fed, the same cache:
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)  # the same scores (to the sums' order)


def test_a_step_rank_0_fails_is_dropped_by_the_follower_too(caplog):
    engine, model, mirror, follower = engines()

    def broken(scores):
        raise ValueError("a grammar error")

    group = rows(1, 5, broken)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="aiayn.serve"):
        with pytest.raises(ValueError, match="a grammar error"):  # the prompt pass picks the first token
            engine.admit(group, torch.randint(4, 40, (1, 4)))
        engine.remove([group])
        again = rows(1, 3)
        engine.admit(again, torch.randint(4, 40, (1, 4)))  # the loop goes on: the next request is served
        while engine.groups or engine.joining:
            engine.step()
            engine.remove_done()
        engine.stop()
    follower.join(timeout=30)
    assert not follower.is_alive() and again.done
    assert "tensor-parallel follower: admit: rank 0's step failed" in caplog.text
    assert len(model.seen) == len(mirror.seen) == 4
    for ours, theirs in zip(model.seen, mirror.seen, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
