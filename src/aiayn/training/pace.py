"""``auto_steps``: the step count a time limit holds, measured on the run's own first steps, so that a recipe
meaning "one hour" ends its schedule at the hour on any machine.

The pace is timed over a window of early steps: after the first few (slower: memory allocation, kernel
selection) and within the warm-up, whose learning rates do not depend on the step count. So a rerun given the
chosen count as ``max_steps`` takes the very same steps. Validation time is not counted (as for
``time_limit_min``).
"""

from __future__ import annotations


def pace_window(warmup: int) -> tuple[int, int]:
    """(first, last): the steps after ``first`` up to ``last`` are timed; ``last`` is within the warm-up."""
    last = max(2, min(100, warmup))
    return min(10, last // 4), last


def steps_held(last: int, seconds_at_last: float, seconds_per_step: float, limit_min: float) -> int:
    """The step count the limit holds: the steps done plus the remaining time over the pace (at least ``last``)."""
    remaining = limit_min * 60 - seconds_at_last
    return last + max(0, int(remaining / max(seconds_per_step, 1e-9)))


class AutoSteps:
    """Times a run's pace window (from its start, or from where a resumed run picks up inside it)."""

    def __init__(self, warmup: int, step: int, seconds: float) -> None:
        self.first, self.last = pace_window(warmup)
        self.start = (step, seconds) if self.first <= step < self.last else None

    def fixed(self, step: int) -> bool:
        """Whether the step count has been chosen by ``step`` (it is then part of the run's recipe)."""
        return step >= self.last

    def observe(self, step: int, seconds: float) -> float | None:
        """After each step (``seconds``: training time so far): the seconds per step when the window closes."""
        if step == self.first:
            self.start = (step, seconds)
        if step != self.last or self.start is None:
            return None
        return (seconds - self.start[1]) / (step - self.start[0])
