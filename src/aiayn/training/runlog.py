"""A run's log: ``RUN/metrics.jsonl`` (one JSON object a line) and, when the tensorboard package is installed,
the same scalars under ``RUN/tensorboard``. Only the main process writes."""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

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

    def start(self, dropped: dict, malloc: str, precision: str, emulated: bool) -> None:
        """A run's first record (step 0): what the data cleaning ``dropped``, the allocator and the precision; the
        main process also prints them, and that bf16 was asked where this CPU would ``emulated`` it."""
        self.write({"step": 0, "data": dropped, "malloc": malloc, "precision": precision})
        if self.writes:
            tqdm.write("data: " + ", ".join(f"{k}={v}" for k, v in dropped.items()) + f"; malloc: {malloc}")
            if emulated:
                tqdm.write("precision: bf16 was asked for, but this CPU has no bfloat16 instructions (AVX512-BF16, "
                           "AMX or AVX-NE-CONVERT) and would convert or emulate it, slower: training in fp32")

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
