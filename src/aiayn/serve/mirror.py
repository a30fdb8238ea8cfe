"""The server split over processes (``--tensor-parallel``): rank 0 serves HTTP and runs the scheduler; every other
rank runs the same engine on its share of the weights, told by rank 0 what the engine does.

The engine's calls that compute (a group admitted, a step, groups removed, encoder-only work) are sent from rank 0
before it makes them, with everything they read (inputs, beams, adapter); each step's choice of tokens, which only
rank 0's rows groups make (sampling, grammars, beams), follows the step. The other ranks' engine stands in for each
group with a :class:`Stand` (its size and limit), so its batch, cache and positions are rank 0's, and each of its
forward passes meets rank 0's in the same collectives (``inference/tensor_parallel.py``).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from torch import Tensor

from aiayn.decoding.engine import Engine

log = logging.getLogger("aiayn.serve")


@dataclass
class Stand:
    """A group of rows as a follower's engine sees it: its size, limit and steps; rank 0 chooses its tokens."""

    size: int
    longest: int
    steps: int = 0
    done = False

    def cancel(self) -> None:  # rank 0 decides; its removal follows
        pass


class LeaderEngine(Engine):
    """Rank 0's engine: each call that computes is first sent to the other ranks (``parallel.share``)."""

    def __init__(self, *args, parallel, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.parallel, self.ids, self.numbers = parallel, {}, itertools.count()

    def admit(self, group, inputs: Tensor, beams: int = 1, adapter: int = 0) -> int:
        if group.done:
            return 0
        number = self.ids[id(group)] = next(self.numbers)
        self.parallel.share(("admit", number, inputs, beams, adapter, group.size, group.longest))
        return super().admit(group, inputs, beams, adapter)

    def step(self) -> None:
        self.parallel.share(("step",))
        super().step()

    def _choose(self, scores: Tensor, groups: list):
        try:
            chosen = super()._choose(scores, groups)
        except Exception:
            self.parallel.share(None)  # the followers drop this step too
            raise
        self.parallel.share((*chosen, [(group.steps, group.done) for group in groups]))
        return chosen

    def remove(self, leaving: list) -> None:
        numbers = [self.ids.pop(id(group)) for group in leaving if id(group) in self.ids]
        self.parallel.share(("remove", numbers))
        super().remove(leaving)

    def encode(self, encode, texts: list[str], options):
        """Encoder-only work (``Scheduler.encode``), on every rank."""
        self.parallel.share(("encode", texts, options))
        return encode(texts, options)

    def stop(self) -> None:
        """Tell the other ranks to return from :func:`follow`."""
        self.parallel.share(("stop",))


class FollowerEngine(Engine):
    """Another rank's engine: rank 0 chooses each step's tokens; this one computes its share and follows."""

    def __init__(self, *args, parallel, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.parallel = parallel

    def _choose(self, scores: Tensor, groups: list):
        chosen = self.parallel.share(None)
        if chosen is None:
            raise RuntimeError("rank 0's step failed")
        nexts, index, steps = chosen
        for group, (taken, done) in zip(groups, steps, strict=True):
            group.steps, group.done = taken, done
        return nexts, index


def lead(scheduler, parallel) -> LeaderEngine:
    """Rank 0: the scheduler's engine replaced by one that sends its calls; its encoder work sent too."""
    engine = LeaderEngine(scheduler.model, capacity=scheduler.capacity, prompt_cache=scheduler.prefix_cache,
                          parallel=parallel)
    scheduler.engine = engine
    if scheduler.encode is not None:
        encode = scheduler.encode
        scheduler.encode = lambda texts, options: engine.encode(encode, texts, options)
    return engine


def follow(scheduler, parallel) -> None:
    """Another rank: do what rank 0's engine does, on this rank's share of the model, until it says stop."""
    import torch

    engine = FollowerEngine(scheduler.model, capacity=scheduler.capacity, prompt_cache=scheduler.prefix_cache,
                            parallel=parallel)
    stands: dict[int, Stand] = {}
    with torch.no_grad():
        while (call := parallel.share(None))[0] != "stop":
            try:
                _follow(engine, scheduler.encode, stands, call)
            except Exception as err:  # rank 0 meets the same error and answers it; the loop goes on
                log.warning("tensor-parallel follower: %s: %s", call[0], err)


def _follow(engine: FollowerEngine, encode, stands: dict[int, Stand], call: tuple) -> None:
    kind, *args = call
    if kind == "admit":
        number, inputs, beams, adapter, size, longest = args
        stands[number] = Stand(size, longest)
        engine.admit(stands[number], inputs, beams, adapter)
    elif kind == "step":
        engine.step()
    elif kind == "remove":
        engine.remove([stands.pop(number) for number in args[0] if number in stands])
    elif kind == "encode":
        encode(*args)
