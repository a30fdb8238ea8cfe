"""--fsdp (FSDP2 fully_shard) under torchrun: the same losses as DDP, ordinary checkpoints, exact resume; the
device of each process."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn import load_model
from tiny_runs import torchrun, train_command, write_recipe

from conftest import trained_once

COMMON = {"max_steps": 6, "eval_every": 3, "log_every": 1, "accum": 2, "model": {"dropout": 0.0},
          "bleu_sentences": 4, "keep_last": 0}


def train(*args: str) -> subprocess.CompletedProcess:
    """``aiayn train ARGS`` in two processes under torchrun; it must succeed."""
    result = torchrun("train", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def losses(run) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if "loss" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A DDP run and an FSDP run of the same recipe (2 processes, accumulation 2), and the FSDP run stopped at
    step 3 then resumed to step 6."""
    def make(tmp: Path) -> None:  # once for both test workers (the tests copy what they change)
        train("--config", str(write_recipe(tmp, "ddp", **COMMON)))
        train("--config", str(write_recipe(tmp, "fsdp", **COMMON)), "--fsdp")
        halted = write_recipe(tmp, "halted", **{**COMMON, "max_steps": 3})
        train("--config", str(halted), "--fsdp")
        train("--config", str(halted), "--resume", "--max-steps", "6")  # the run's recipe: --fsdp is kept
    return trained_once(tmp_path_factory, "fsdp", make)


@pytest.mark.long  # torchrun: reads the FSDP and DDP runs (make test-long)
def test_fsdp_gives_the_losses_of_ddp(runs):
    ddp, sharded = losses(runs / "ddp"), losses(runs / "fsdp")
    assert len(ddp) == len(sharded) == 6
    assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(ddp, sharded, strict=True)), (ddp, sharded)
    assert sharded[-1] < sharded[0]


@pytest.mark.long  # torchrun: reads the FSDP and DDP runs (make test-long)
def test_each_rank_holds_its_share_and_the_weights_equal_ddps(runs):
    """Sharded, not DDP under another name: rank 0 holds about half the parameters and half of Adam's moments
    (two processes); the trained weights equal DDP's by value."""
    records = [json.loads(line) for line in (runs / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    share = next(r["fsdp_rank0"] for r in records if "fsdp_rank0" in r)
    half = share["parameters"] / 2
    assert 0.45 * share["parameters"] <= share["rank_parameters"] <= 0.55 * share["parameters"], share
    assert 0.9 * half * 2 <= share["rank_optimizer_elements"] <= 1.1 * half * 2, share  # exp_avg + exp_avg_sq
    ddp, sharded = (load_file(str(runs / r / "last" / "model.safetensors")) for r in ("ddp", "fsdp"))
    for name in ddp:
        if name.endswith("k_proj.bias"):  # its gradient is 0 (softmax ignores a constant): Adam walks on rounding
            assert ddp[name].abs().max() < 1e-3 and sharded[name].abs().max() < 1e-3, name  # noise, both ways
        else:
            assert torch.allclose(ddp[name], sharded[name], rtol=0, atol=1e-5), name


@pytest.mark.long  # torchrun: reads the FSDP and DDP runs (make test-long)
def test_an_fsdp_checkpoint_is_an_ordinary_one(runs):
    """The full weights and the full optimizer state, in the layout DDP and one process write."""
    ddp, sharded = runs / "ddp" / "last", runs / "fsdp" / "last"
    assert sorted(p.name for p in ddp.iterdir()) == sorted(p.name for p in sharded.iterdir())
    for name in ("model.safetensors", "trainer.safetensors"):
        a, b = load_file(str(ddp / name)), load_file(str(sharded / name))
        assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a), name
    model = load_model(sharded)
    assert sum(p.numel() for p in model.parameters()) == sum(t.numel() for t in load_file(
        str(ddp / "model.safetensors")).values())
    state = json.loads((sharded / "trainer.json").read_text())
    assert state["step"] == 6 and state["recipe"]["fsdp"] is True


@pytest.mark.long  # torchrun: reads the FSDP and DDP runs (make test-long)
def test_a_resumed_fsdp_run_ends_bit_for_bit_where_an_uninterrupted_one_does(runs):
    whole, resumed = (load_file(str(runs / r / "last" / "model.safetensors")) for r in ("fsdp", "halted"))
    assert whole.keys() == resumed.keys() and all((whole[k] == resumed[k]).all() for k in whole)
    assert losses(runs / "halted") == losses(runs / "fsdp")
    moments = [load_file(str(runs / r / "last" / "trainer.safetensors")) for r in ("fsdp", "halted")]
    assert all((moments[0][k] == moments[1][k]).all() for k in moments[0] if k.startswith("optim."))


def test_fsdp_needs_several_processes(tmp_path):
    result = subprocess.run(train_command("--config", str(write_recipe(tmp_path, "one", **COMMON)), "--fsdp"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "fsdp (field fsdp): shards over several processes: start with torchrun" in last
    assert [p.name for p in (tmp_path / "one").iterdir()] == [".aiayn.json"]  # the claimed folder, empty


def test_fsdp_refuses_lora_by_name(tmp_path):
    from aiayn.training.config import TrainConfig

    with pytest.raises(ValueError, match="fsdp: not with lora_r: a LoRA run's training state is a few MB"):
        TrainConfig(init_from=str(tmp_path), lora_r=4, fsdp=True)


def test_each_process_trains_on_its_local_rank_gpu():
    """Under torchrun on CUDA, rank r of a machine takes cuda:r (N processes, N GPUs); one process, a CPU, or
    a device named with its index are left as they are."""
    import torch

    from aiayn.training.distributed import DistInfo, rank_device

    one, third = DistInfo(), DistInfo(rank=5, world=8, local_rank=1)
    if not torch.cuda.is_available() or torch.cuda.device_count() > 1:
        assert rank_device(torch.device("cuda"), third) == torch.device("cuda", 1)
    assert rank_device(torch.device("cuda"), one) == torch.device("cuda")
    assert rank_device(torch.device("cpu"), third) == torch.device("cpu")
    assert rank_device(torch.device("cuda", 0), third) == torch.device("cuda", 0)


@pytest.mark.long  # torchrun: reads the FSDP and DDP runs (make test-long)
def test_a_sharded_run_resumes_without_sharding(runs, tmp_path):
    """Its checkpoint has DDP's layout, so DDP continues it (--no-fsdp on --resume) from the very weights."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs / "fsdp", run)
    start = load_file(str(run / "last" / "model.safetensors"))
    result = train("--resume", "--output", str(run), "--max-steps", "8", "--no-fsdp")
    assert "fsdp: True -> False" in result.stderr
    state = json.loads((run / "last" / "trainer.json").read_text())
    assert state["step"] == 8 and state["recipe"]["fsdp"] is False
    assert losses(run)[-1] < losses(run)[0]
    end = load_file(str(run / "last" / "model.safetensors"))
    assert any(not (start[k] == end[k]).all() for k in start)
