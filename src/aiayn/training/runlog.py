"""A run's log: ``RUN/metrics.jsonl`` (one JSON object a line) and, when the tensorboard package is installed,
the same scalars under ``RUN/tensorboard``. Only the main process writes."""

from __future__ import annotations

import json
from pathlib import Path

from aiayn.io.files import atomic_write_text
from aiayn.io.run import RunFolder


class RunLog:
    def __init__(self, run: RunFolder, writes: bool) -> None:
        self.path, self.writes = run.metrics, writes
        self.board = _tensorboard(run.path) if writes else None

    def write(self, record: dict) -> None:
        """Append one record; numbers of a record with a ``step`` also go to TensorBoard."""
        if not self.writes:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.board is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.board.add_scalar(key, value, record["step"])

    def truncate(self, step: int) -> None:
        """Drop the records after ``step`` (a resumed run logs those steps again)."""
        if self.writes and self.path.is_file():
            keep = [line for line in self.path.read_text().splitlines() if json.loads(line).get("step", 0) <= step]
            atomic_write_text(self.path, "".join(line + "\n" for line in keep))


def _tensorboard(out: Path):
    """A TensorBoard writer for RUN/tensorboard when the tensorboard package is installed, else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(out / "tensorboard"))
