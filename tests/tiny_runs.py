"""A tiny training recipe (the reverse task) and the command lines that train it (one process, or two under
torchrun), shared by the training tests."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

TINY = {"data": "reverse", "preset": "tiny", "vocab_size": 300, "synthetic_size": 400, "max_tokens": 256,
        "bleu_sentences": 20, "warmup": 20, "schedule": "inverse_sqrt", "lr": 2e-3, "log_every": 5,
        "keep_last": 2, "device": "cpu"}


def write_recipe(tmp_path: Path, name: str, **changes) -> Path:
    """Write TINY plus ``changes`` as ``tmp_path/NAME.yaml``, training into ``tmp_path/NAME``."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({**TINY, "output": str(tmp_path / name), **changes}))  # JSON is YAML
    return path


def train_command(*args: str) -> list[str]:
    """``aiayn train ARGS`` as a command for subprocess."""
    return [sys.executable, "-m", "aiayn", "train", *args]


def torchrun(*args: str, timeout: float = 300, program: tuple[str, ...] = ("-m", "aiayn"),
             stdin: str | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2 -m aiayn ARGS`` (one thread each; ``program``: another module or
    a script; ``stdin``: text rank 0 may read). A run still going after ``timeout`` seconds fails the test with every
    process's stack (faulthandler on SIGABRT), and none of its processes is left holding the cores."""
    command = [*torchrun_command(), *program, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            stdout, stderr = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:  # a hang (seen once in an FSDP run under the full suite's load)
            abort([*workers(proc.pid), proc.pid])
            stderr = proc.communicate(timeout=20)[1]
            stacks = stderr[max(stderr.find("Fatal Python error"), 0):]  # faulthandler's dumps, each process's
            pytest.fail(f"torchrun {' '.join(args)} hung for {timeout:g} s; the stacks at that moment:\n{stacks}")
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def torchrun_command(nproc: int = 2) -> list[str]:
    """``torchrun --standalone --nproc_per_node N``, as a command for subprocess (the program follows)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]


def workers(pid: int) -> list[int]:
    """The processes torchrun ``pid`` started (each in a session of its own: out of reach of its group)."""
    def parent(entry: str) -> int:
        with contextlib.suppress(OSError):
            return int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return 0
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and parent(entry) == pid]


def abort(pids: list[int]) -> None:
    """SIGABRT: each prints its threads' stacks (faulthandler) and ends; SIGKILL a moment later if not."""
    for signum, wait in ((signal.SIGABRT, 3), (signal.SIGKILL, 0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        time.sleep(wait)


def step_of(run: Path) -> int:
    """The step of a run's ``last/`` checkpoint (0 before the first).

    A live run swaps ``last/`` by two renames (``last`` -> ``.last.old``, then the new one -> ``last``), so a
    read can fall between them: then ``.last.old`` holds the checkpoint (as ``recover`` would restore it),
    or the new ``last/`` appears a moment later.
    """
    for _ in range(50):
        for folder in ("last", ".last.old"):
            try:
                return json.loads((run / folder / "trainer.json").read_text())["step"]
            except FileNotFoundError:
                continue
        if not any(run.glob(".last.*")):
            return 0  # no checkpoint, and none being written
        time.sleep(0.01)
    return 0


def wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until the run's ``last/`` checkpoint is at ``step`` or later (or the process ends)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and step_of(run) < step:
        time.sleep(0.02)
    assert step_of(run) >= step, f"the run never reached step {step}"


def weights(run: Path) -> dict:
    return load_file(str(run / "last" / "model.safetensors"))


def kill_and_resume(tmp_path: Path, **steps) -> tuple[int, dict, dict]:
    """Train run ``whole`` through; train run ``killed`` the same way, SIGKILL it once its checkpoint is at
    step 20 or later, resume it to the end. Returns the step it was killed at and both final weights."""
    whole = subprocess.run(train_command("--config", str(write_recipe(tmp_path, "whole", **steps))),
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    recipe = write_recipe(tmp_path, "killed", **steps)
    proc = subprocess.Popen(train_command("--config", str(recipe)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_for_step(tmp_path / "killed", 20, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = step_of(tmp_path / "killed")
    result = subprocess.run(train_command("--config", str(recipe), "--resume"), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return killed_at, weights(tmp_path / "whole"), weights(tmp_path / "killed")
