"""auto_steps: the step count a time limit holds, timed on the run's first steps; recorded in the run, kept on
resume, and reproduced bit for bit by a rerun given that count."""

import json
import os
import signal
import subprocess

import pytest
import torch

from aiayn.training.config import TrainConfig
from aiayn.training.pace import AutoSteps, pace_window, steps_held
from tiny_runs import step_of, train_command, wait_for_step, weights, write_recipe


def test_the_window_ends_within_the_warm_up_after_the_first_steps():
    assert pace_window(400) == (10, 100) and pace_window(40) == (10, 40) and pace_window(8) == (2, 8)
    assert pace_window(0) == (0, 2)  # no warm-up: time the first two steps


def test_the_steps_held_fill_the_limit_at_the_measured_pace():
    assert steps_held(100, 30.0, 0.5, limit_min=1.0) == 160  # 30 s left at 0.5 s a step
    assert steps_held(100, 90.0, 0.5, limit_min=1.0) == 100  # already past the limit: stop at the window's end


def test_the_pace_is_timed_over_the_window_or_from_where_a_resumed_run_starts_in_it():
    auto = AutoSteps(warmup=40, step=0, seconds=0.0)
    assert [auto.observe(s, s * 0.1 + (5.0 if s > 10 else 0.0)) for s in (1, 10, 11, 39)] == [None] * 4
    assert auto.observe(40, 40 * 0.1 + 5.0) == pytest.approx((9.0 - 1.0) / 30)  # steps 11-40 only
    resumed = AutoSteps(warmup=40, step=25, seconds=10.0)
    assert resumed.observe(40, 13.0) == pytest.approx(3.0 / 15) and resumed.fixed(40) and not resumed.fixed(39)


def test_auto_steps_needs_a_time_limit():
    with pytest.raises(ValueError, match="auto_steps: needs time_limit_min"):
        TrainConfig(auto_steps=True)


def _chosen(run) -> int:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    chosen = [x for x in lines if "max_steps" in x]
    assert len(chosen) == 1 and chosen[0]["step"] == 40 and chosen[0]["seconds_per_step"] > 0
    return chosen[0]["max_steps"]


@pytest.mark.long  # three runs, one against a wall-clock limit
def test_an_auto_run_says_its_count_keeps_it_through_a_stop_and_ends_as_a_run_of_that_count(tmp_path):
    """auto_steps chooses a count and says it; SIGTERM after the window, then --resume with the same recipe, keeps
    the run's count (its state), not a new measurement or the recipe's max_steps; and the run ends bit for bit as
    a plain run of that count (one run tells all three)."""
    recipe = {"schedule": "cosine", "warmup": 40, "eval_every": 20, "bleu_sentences": 0, "max_steps": 50}
    auto = write_recipe(tmp_path, "auto", **recipe, auto_steps=True, time_limit_min=0.15)
    log = tmp_path / "auto.log"
    with log.open("w") as out:
        proc = subprocess.Popen(train_command("--config", str(auto)), stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for_step(tmp_path / "auto", 60, proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    chosen, stopped_at = _chosen(tmp_path / "auto"), step_of(tmp_path / "auto")
    assert proc.returncode == 143 and 60 <= stopped_at < chosen and chosen > 100
    assert f"hold {chosen} steps" in log.read_text()
    result = subprocess.run(train_command("--config", str(auto), "--resume"), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert step_of(tmp_path / "auto") == chosen and _chosen(tmp_path / "auto") == chosen
    again = write_recipe(tmp_path, "again", **{**recipe, "max_steps": chosen})
    assert subprocess.run(train_command("--config", str(again)), capture_output=True, timeout=300).returncode == 0
    mine, theirs = weights(tmp_path / "auto"), weights(tmp_path / "again")
    assert all(torch.equal(mine[k], theirs[k]) for k in mine), "the resumed auto run differs"
