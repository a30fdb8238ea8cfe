"""LoRA fine-tuning: ``--lora-r`` trains adapters only, the run's checkpoints are PEFT adapter folders (a few
kB here), the base stays as it was, a resumed run ends where an uninterrupted one does, and the adapter runs
with ``--adapter`` or merged."""

import json

import pytest
import torch
from safetensors.torch import load_file

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint

TEXT = "".join(f"the bird flew over a house {i % 7} . my friend read a book .\n" for i in range(200))


def _lora(lm_run, tmp_path, out: str, steps: int, *flags) -> list[str]:
    (tmp_path / "new.txt").write_text(TEXT)
    return ["train", "--task", "lm", "--data", str(tmp_path / "new.txt"), "--init-from", str(lm_run),
            "--output", str(tmp_path / out), "--block-size", "32", "--max-tokens", "256", "--max-steps", str(steps),
            "--eval-every", "10", "--keep-last", "0", "--warmup", "1", "--schedule", "constant", "--lr", "1e-2",
            "--lora-r", "4", "--lora-alpha", "8", "--lora-targets", "q,v,ffn", "--device", "cpu", *flags]


def test_a_lora_run_saves_adapters_and_leaves_the_base(lm_run, tmp_path, capsys):
    assert main(_lora(lm_run, tmp_path, "run", 20)) == 0
    best = tmp_path / "run" / "best"
    assert not (best / "config.json").exists() and (best / "adapter_config.json").is_file()
    config = json.loads((best / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (4, 8.0, str(lm_run))
    tensors = load_file(str(best / "adapter_model.safetensors"))
    base, _ = load_checkpoint(lm_run)
    assert all(".lora_A." in k or ".lora_B." in k for k in tensors)
    assert sum(t.numel() for t in tensors.values()) < 0.2 * sum(p.numel() for p in base.parameters())
    assert any(k.endswith("lora_B.weight") and t.abs().sum() > 0 for k, t in tensors.items())  # it trained
    capsys.readouterr()
    prompt = ["--prompt", "the bird", "--temperature", "0", "--max-new-tokens", "12"]
    assert main(["generate", "--checkpoint", str(lm_run), "--adapter", str(best), *prompt]) == 0
    adapted = capsys.readouterr().out
    assert main(["generate", "--checkpoint", str(lm_run), *prompt]) == 0
    assert capsys.readouterr().out != adapted  # the adapter changed what the model writes
    assert main(["merge", "--checkpoint", str(lm_run), "--adapter", str(best), "--output", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(tmp_path / "m"), *prompt]) == 0
    assert capsys.readouterr().out == adapted  # merged: the same greedy text as the adapter unmerged
    assert main(["generate", "--checkpoint", str(tmp_path / "run"), *prompt]) == 2
    assert "a LoRA run, its checkpoints are adapters" in capsys.readouterr().err


def test_resuming_a_lora_run_ends_where_an_uninterrupted_one_does(lm_run, tmp_path):
    assert main(_lora(lm_run, tmp_path, "whole", 20)) == 0
    assert main(_lora(lm_run, tmp_path, "parts", 10)) == 0
    assert main(["train", "--resume", "--output", str(tmp_path / "parts"), "--max-steps", "20"]) == 0
    whole, parts = (load_file(str(tmp_path / name / "last" / "adapter_model.safetensors")) for name in
                    ("whole", "parts"))
    assert whole.keys() == parts.keys() and all(torch.equal(whole[k], parts[k]) for k in whole)


def test_lora_needs_a_checkpoint_to_adapt(tmp_path, capsys):
    assert main(["train", "--data", "reverse", "--lora-r", "4", "--output", str(tmp_path / "r")]) == 2
    assert "(field lora_r): LoRA adapts a pretrained model: give init_from" in capsys.readouterr().err


def test_a_lora_runs_step_adapters_average_into_an_adapter(lm_run, tmp_path, capsys):
    args = _lora(lm_run, tmp_path, "run", 30)
    args[args.index("--keep-last") + 1] = "3"
    assert main(args) == 0
    steps = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert len(steps) == 3
    assert main(["average", "--run", str(tmp_path / "run"), "--last", "3", "--output", str(tmp_path / "avg")]) == 0
    averaged = load_file(str(tmp_path / "avg" / "adapter_model.safetensors"))
    each = [load_file(str(s / "adapter_model.safetensors")) for s in steps]
    assert averaged.keys() == each[0].keys()
    assert all(torch.allclose(averaged[k], sum(e[k] for e in each) / 3, atol=1e-7) for k in averaged)
    assert not all(torch.equal(averaged[k], each[-1][k]) for k in averaged)  # not merely the last one
    assert json.loads((tmp_path / "avg" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(lm_run)
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(lm_run), "--adapter", str(tmp_path / "avg"), "--prompt", "the bird",
                 "--temperature", "0", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.long  # a training process killed and resumed
def test_a_lora_run_killed_mid_way_resumes_to_the_same_adapter(lm_run, tmp_path):
    """SIGKILL during a LoRA fine-tune, then --resume: the adapter tensors of a run never interrupted, bit for bit."""
    import signal
    import subprocess
    import sys

    from tiny_runs import step_of, wait_for_step

    def aiayn(*args: str) -> list[str]:
        return [sys.executable, "-m", "aiayn", *args]

    whole = subprocess.run(aiayn(*_lora(lm_run, tmp_path, "whole", 60)), capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = _lora(lm_run, tmp_path, "killed", 60)
    proc = subprocess.Popen(aiayn(*killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_step(tmp_path / "killed", 10, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = step_of(tmp_path / "killed")
    resumed = subprocess.run(aiayn(*killed, "--resume"), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = (load_file(str(tmp_path / run / "last" / "adapter_model.safetensors")) for run in ("whole", "killed"))
    assert 10 <= killed_at < 60 and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), killed_at
