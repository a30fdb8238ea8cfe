"""How long a chunk of a prompt joining running rows is (chunked prefill, ``decoding/engine.py``): sized from the
running rows' measured step times to a budget, the first chunk and a fixed count without one."""

from __future__ import annotations

from aiayn.model.config import ModelConfig

ATTENTION_RATE = 0.5  # a CPU's attention over a long cache runs at about half its projections' rate (SmolLM2, 2 cores)
ALONE_CHUNK = 512  # a prompt's columns computed a pass while no rows run (a newcomer waits at most one such pass)
SMOOTHING = 0.25  # the weight of the newest step in the measured step times (an exponential moving average)
PROBE_EVERY = 8  # with a budget, every this many steps carrying a chunk are followed by one without (measured)


class ChunkSizer:
    """Chunk sizes for a model's long prompts.

    Args:
        config: the model's (its ``attention_break_even``: what a column at a position costs).
        columns: a chunk's columns at a prompt's start before anything is measured, or always without a budget.
        budget: how long a step carrying a chunk may take, as a multiple of the running rows' step alone: once both
            are measured (:meth:`measure`), each chunk is as many columns as fit it on this machine, this model and
            this batch; every ``PROBE_EVERY`` steps with a chunk, one goes without (:meth:`probe`), so the rows'
            own step stays measured as their caches grow. None or 0: ``columns`` at the start, fewer further on,
            whatever they cost.
    """

    def __init__(self, config: ModelConfig, columns: int, budget: float | None = None) -> None:
        self.config, self.columns, self.budget = config, columns, budget
        self.plain_s: float | None = None  # a step of the running rows alone, measured (moving average)
        self.column_s: float | None = None  # what one chunk column adds to it, at weight 1 (:meth:`weight`)
        self.chunked = 0  # steps with a chunk since the last without

    def size(self, position: int) -> int:
        """Columns of a chunk starting at ``position`` beside running rows: with a budget and both step times
        measured, as many as add ``budget - 1`` running steps to the step, at their measured cost; else
        ``columns`` at a prompt's start and fewer further on, each costing :meth:`weight` columns (so a step keeps
        about one length). At least 1, at most ``ALONE_CHUNK``."""
        weight = self.weight(position)
        if self.budget and self.plain_s and self.column_s:
            size = (self.budget - 1) * self.plain_s / (self.column_s * weight)
        else:
            size = self.columns / weight
        return min(ALONE_CHUNK, max(1, round(size)))

    def weight(self, position: float) -> float:
        """What a chunk column at ``position`` costs against one at the start: each also attends to every earlier
        one (``ModelConfig.attention_break_even``), and attention runs at about ``ATTENTION_RATE`` of the
        projections' rate."""
        return 1 + position / (self.config.attention_break_even * ATTENTION_RATE)

    def probe(self) -> bool:
        """Whether this step of the running rows goes without the waiting chunk (measured alone again)."""
        return bool(self.budget) and self.chunked >= PROBE_EVERY

    def measure(self, seconds: float, columns: int, position: int) -> None:
        """Fold one pass of the running rows into the measured times: alone (``columns`` 0), or with a chunk of
        ``columns`` from ``position`` (what it took beyond the rows' own step, per weighted column)."""
        if not columns:
            self.chunked = 0
            self.plain_s = seconds if self.plain_s is None else _average(self.plain_s, seconds)
            return
        self.chunked += 1
        if self.plain_s:
            weighted = columns * self.weight(position + (columns - 1) / 2)  # the mean column's weight
            extra = max(seconds - self.plain_s, 0.01 * self.plain_s) / weighted
            self.column_s = extra if self.column_s is None else _average(self.column_s, extra)


def _average(mean: float, value: float) -> float:
    """``value`` folded into the moving average ``mean``."""
    return (1 - SMOOTHING) * mean + SMOOTHING * value
