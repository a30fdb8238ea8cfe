"""``RunFolder``: the one place that knows a run's layout."""

import json

import pytest

from aiayn import EncoderDecoder
from aiayn.io.run import RunFolder, resolve_checkpoint

from conftest import tiny


def test_layout_steps_and_prune(tmp_path):
    run = RunFolder(tmp_path / "run")
    assert not run.is_run()
    for step in (300, 100, 200):
        EncoderDecoder(tiny()).save(run.step(step))
    (run.checkpoints / "step_00000400").mkdir()  # a folder a kill left without config.json: not a checkpoint
    assert run.steps() == [run.step(100), run.step(200), run.step(300)]
    assert run.step(100).name == "step_00000100"
    run.prune(2)
    assert run.steps() == [run.step(200), run.step(300)]
    assert run.is_run() is False and not run.has_last()  # step checkpoints alone are not best/ or last/
    EncoderDecoder(tiny()).save(run.last)
    assert run.has_last() and not run.resumable()  # a checkpoint, but no trainer state
    assert run.is_run() and run.for_use() == run.last and resolve_checkpoint(run.path) == run.last
    EncoderDecoder(tiny()).save(run.best)
    assert resolve_checkpoint(run.path) == run.best
    assert resolve_checkpoint(run.best) == run.best


def test_errors_name_the_file(tmp_path):
    run = RunFolder(tmp_path)
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder"):
        run.for_use()
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        run.records()
    with pytest.raises(FileNotFoundError, match="holds no checkpoint to resume from"):
        run.saved_recipe()
    run.metrics.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n\n{broken\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: not a JSON line"):
        run.records()
    EncoderDecoder(tiny()).save(run.last)
    (run.last / "trainer.json").write_text(json.dumps({"step": 5}))
    with pytest.raises(ValueError, match="no recipe saved"):
        run.saved_recipe()
    (run.last / "trainer.json").write_text(json.dumps({"step": 5, "recipe": {"task": "lm"}}))
    assert run.saved_recipe() == {"task": "lm"}
