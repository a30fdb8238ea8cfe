"""A run folder, the one place that knows its layout.

``RUN/best/`` (the best validation score), ``RUN/last/`` (what ``--resume`` reads: the checkpoint plus
``trainer.json`` and ``trainer.safetensors``), ``RUN/checkpoints/step_N/`` (what ``aiayn average`` reads),
``RUN/tokenizer/`` and ``RUN/metrics.jsonl`` (one JSON object a line). No torch here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from aiayn.io.checkpoint import is_adapter, is_checkpoint
from aiayn.io.files import read_json

TRAINER_JSON, TRAINER_TENSORS = "trainer.json", "trainer.safetensors"
BEST, LAST, CHECKPOINTS, METRICS = "best", "last", "checkpoints", "metrics.jsonl"
RUN_FILES = (METRICS, LAST, BEST, CHECKPOINTS)  # any of them in a folder: training wrote there (its own)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder means itself, and so does a GGUF file (:func:`is_gguf`); a run folder means the
    checkpoint to use (:meth:`RunFolder.for_use`)."""
    path = Path(path)
    return path if is_checkpoint(path) or is_gguf(path) else RunFolder(path).for_use()


def is_gguf(path: str | Path) -> bool:
    """A file that starts as GGUF files do (llama.cpp's format: ``aiayn.formats.gguf``)."""
    path = Path(path)
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


class RunFolder:
    """The paths of one training run, and what can be read from them without loading a model."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.best, self.last = self.path / BEST, self.path / LAST
        self.checkpoints = self.path / CHECKPOINTS
        self.tokenizer = self.path / "tokenizer"
        self.metrics = self.path / METRICS

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def step(self, step: int) -> Path:
        """The folder of the step-``step`` checkpoint (zero-padded, so names sort by step)."""
        return self.checkpoints / f"step_{step:08d}"

    def steps(self) -> list[Path]:
        """The step checkpoints, oldest first."""
        return sorted(p for p in self.checkpoints.glob("step_*") if is_checkpoint(p) or is_adapter(p))

    def prune(self, keep: int) -> None:
        """Delete all but the newest ``keep`` step checkpoints (the run's own folders)."""
        for old in self.steps()[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)

    def is_run(self) -> bool:
        """Training has written here: a metrics file or a checkpoint."""
        return self.metrics.is_file() or self.has_last() or is_checkpoint(self.best) or is_adapter(self.best)

    def has_last(self) -> bool:
        """``last/`` holds a checkpoint: a run to continue with ``--resume``, not to start again."""
        return is_checkpoint(self.last) or is_adapter(self.last)

    def resumable(self) -> bool:
        return self.has_last() and (self.last / TRAINER_JSON).is_file()

    def for_use(self) -> Path:
        """The checkpoint a product loads from a run: ``best/``, else ``last/``."""
        for folder in (self.best, self.last):
            if is_checkpoint(folder):
                return folder
            if is_adapter(folder):
                raise ValueError(f"{self.path}: a LoRA run, its checkpoints are adapters; run the base model with "
                                 f"--adapter {folder} (or fold it in with aiayn merge)")
        raise FileNotFoundError(f"{self.path}: neither a checkpoint folder (config.json) nor a run folder with "
                                "best/ or last/")

    def saved_recipe(self) -> dict:
        """The recipe the run was trained with (in ``last/trainer.json``), for ``--resume``."""
        state = self.last / TRAINER_JSON
        if not self.resumable():
            raise FileNotFoundError(f"--resume: {self.last} holds no checkpoint to resume from")
        recipe = read_json(state).get("recipe")
        if not isinstance(recipe, dict):
            raise ValueError(f"{state}: no recipe saved; cannot resume this run")
        return recipe

    def records(self) -> list[dict]:
        """Every line of ``metrics.jsonl``; a damaged line is a ValueError naming it."""
        if not self.metrics.is_file():
            raise FileNotFoundError(f"{self.metrics}: no metrics file; is {self.path} a run folder?")
        records = []
        for number, line in enumerate(self.metrics.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                raise ValueError(f"{self.metrics}:{number}: not a JSON line") from None
        return records
