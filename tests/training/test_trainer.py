"""The training loop: exact resume after SIGKILL, DDP equals one process, atomic checkpoints, lm/mlm."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn.io.files import atomic_directory
from aiayn.training.config import RECIPES, TrainConfig, read_recipe
from aiayn.training.trainer import Trainer
from tiny_runs import TINY, kill_and_resume, torchrun, train_command, write_recipe


def test_killed_run_resumes_to_bitwise_identical_weights(tmp_path):
    killed_at, whole, resumed = kill_and_resume(tmp_path, max_steps=60, eval_every=10, model={"dropout": 0.1},
                                              weight_decay=0.1)  # two parameter groups, both restored
    assert 20 <= killed_at < 60, killed_at
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    steps_logged = [json.loads(x)["step"] for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps_logged == sorted(steps_logged)


@pytest.mark.long  # two trainings and a resume: 14 s
def test_a_bpe_dropout_run_trains_resumes_and_refuses_several_processes(tmp_path):
    recipe = write_recipe(tmp_path, "bd", max_steps=20, eval_every=10, subword_dropout=0.1)
    assert subprocess.run(train_command("--config", str(recipe)), capture_output=True, timeout=300).returncode == 0
    more = subprocess.run(train_command("--config", str(recipe), "--resume", "--max-steps", "30"),
                          capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    evals = [json.loads(x) for x in (tmp_path / "bd" / "metrics.jsonl").read_text().splitlines() if "valid_loss" in x]
    assert [e["step"] for e in evals] == [10, 20, 30] and evals[-1]["valid_loss"] < evals[0]["valid_loss"]
    result = torchrun("train", "--config", str(recipe), "--output", str(tmp_path / "two"))
    assert result.returncode != 0 and "subword_dropout: one process only" in result.stderr


def test_bpe_dropout_samples_the_training_pairs_only(tmp_path, monkeypatch):
    """Validation (its loss and its BLEU), ``aiayn evaluate`` and ``aiayn translate`` (the Translator) segment
    plainly: every SentencePiece call that samples comes from the training task's segmentation."""
    import sentencepiece

    from aiayn.inference.translator import Translator

    calls, phase, original = [], ["build"], sentencepiece.SentencePieceProcessor.encode

    def spy(self, *args, **kwargs):
        calls.append((phase[0], bool(kwargs.get("enable_sampling"))))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sentencepiece.SentencePieceProcessor, "encode", spy)
    trainer = Trainer(TrainConfig(**{**TINY, "output": str(tmp_path / "bd"), "subword_dropout": 0.5,
                                     "max_steps": 4, "eval_every": 4}))
    phase[0] = "train"
    trainer.task.batches(1)  # an epoch's segmentation of the training pairs
    assert ("train", True) in calls
    phase[0] = "validate"
    trainer.validate()
    phase[0] = "translate"
    Translator(trainer.plain.eval(), trainer.tokenizers).translate(trainer.splits.valid.sources[:8])
    assert [c for c in calls if c[0] != "train" and c[1]] == [], "building, validation or translation sampled"
    assert {c[0] for c in calls} == {"build", "train", "validate", "translate"}


def test_an_rdrop_run_trains_and_resumes_only_with_its_alpha(tmp_path):
    recipe = write_recipe(tmp_path, "rd", max_steps=20, eval_every=10, rdrop=1.0, model={"dropout": 0.1})
    first = subprocess.run(train_command("--config", str(recipe)), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    evals = [json.loads(x) for x in (tmp_path / "rd" / "metrics.jsonl").read_text().splitlines() if "valid_loss" in x]
    assert [e["step"] for e in evals] == [10, 20] and evals[-1]["valid_loss"] < evals[0]["valid_loss"]
    other = subprocess.run(train_command("--config", str(recipe), "--resume", "--rdrop", "0", "--max-steps", "30"),
                           capture_output=True, text=True, timeout=300)
    assert other.returncode != 0 and "--rdrop (field rdrop): run has 1.0, asked 0.0" in other.stderr


@pytest.mark.long  # torchrun: two processes
def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    common = {"max_steps": 6, "eval_every": 6, "model": {"dropout": 0.0}, "bleu_sentences": 0, "keep_last": 0}
    one = write_recipe(tmp_path, "one", accum=2, **common)
    two = write_recipe(tmp_path, "two", accum=1, **common)
    assert subprocess.run(train_command("--config", str(one)), capture_output=True, timeout=300).returncode == 0
    result = torchrun("train", "--config", str(two))
    assert result.returncode == 0, result.stderr[-3000:]
    a = load_file(str(tmp_path / "one" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "last" / "model.safetensors"))
    # The key bias gets a gradient that is zero in exact arithmetic (softmax ignores a score shift shared by
    # all keys), so Adam turns rounding noise into full-size steps there; every other weight must agree.
    bad = [k for k in a if "k_proj.bias" not in k and not torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4)]
    assert not bad, bad
    lines = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len({line for line in lines}), "rank 0 alone writes metrics"


def test_interrupted_write_leaves_the_previous_checkpoint(tmp_path):
    target = tmp_path / "last"
    with atomic_directory(target, "test") as tmp:
        (tmp / "model.safetensors").write_text("good")
    with pytest.raises(RuntimeError), atomic_directory(target, "test") as tmp:
        (tmp / "model.safetensors").write_text("half")
        raise RuntimeError("killed mid-write")
    assert (target / "model.safetensors").read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["last"]


def train_text_task(tmp_path: Path, task: str, seed: int = 0) -> tuple[dict, list[dict]]:
    """80 steps of ``task`` (lm or mlm) on a repeated sentence: the trainer's result and the metrics' records."""
    text = tmp_path / "text.txt"
    text.write_text("".join(f"the cat sat on the mat number {i % 7} and slept .\n" for i in range(400)))
    cfg = TrainConfig(data=str(text), task=task, preset="tiny", output=str(tmp_path / task), vocab_size=300,
                      block_size=32, max_tokens=512, max_steps=80, eval_every=40, schedule="inverse_sqrt",
                      lr=3e-3, warmup=10, keep_last=0, log_every=10, model={"dropout": 0.0}, seed=seed)
    result = Trainer(cfg).train()
    return result, [json.loads(x) for x in (tmp_path / task / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_language_model_tasks_train_and_lower_the_loss(tmp_path, task):
    result, records = train_text_task(tmp_path, task)
    losses = [r["loss"] for r in records if "loss" in r]
    # last over first, 8 runs (seeds 0-1, 1-2 threads, AVX512 and AVX2 kernels: bench_learning_spread.py --measures
    # trainer): lm 0.305-0.322, mlm 0.485-0.664 (one batch's loss: noisy); so 0.5 and 0.85
    assert losses[-1] < (0.5 if task == "lm" else 0.85) * losses[0], losses
    assert result["valid_loss"] < losses[0]
    assert (tmp_path / task / "best" / "model.safetensors").is_file()
    assert all(100 < r["rss_mb"] < 24_000 for r in records if "loss" in r)  # resident memory, logged with the loss


def test_early_stopping_on_patience(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "output": str(tmp_path / "es"), "max_steps": 100, "eval_every": 5,
                                 "patience": 2, "lr": 1e-12, "bleu_sentences": 5})
    Trainer(cfg).train()
    records = [json.loads(x) for x in (tmp_path / "es" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "valid_loss" in r] == [5, 10, 15]


def test_learning_rate_schedules():
    from aiayn.training.objective import noam_lr

    assert noam_lr(4000, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)
    assert noam_lr(100, 512, 4000) < noam_lr(4000, 512, 4000) > noam_lr(16000, 512, 4000)
    assert noam_lr(16000, 512, 4000) == pytest.approx(512 ** -0.5 * 16000 ** -0.5)
    from aiayn.training.build import learning_rate

    inverse_sqrt = TrainConfig(schedule="inverse_sqrt", lr=1e-3, warmup=100)
    assert learning_rate(inverse_sqrt, 512, 50) == pytest.approx(5e-4)
    assert learning_rate(inverse_sqrt, 512, 100) == pytest.approx(1e-3)
    assert learning_rate(inverse_sqrt, 512, 400) == pytest.approx(5e-4)
    noam = TrainConfig(schedule="noam", warmup=4000, lr_factor=1.0)
    assert learning_rate(noam, 512, 16000) == pytest.approx(512 ** -0.5 * 16000 ** -0.5)  # d_model is noam's own


def test_cpu_precision_choices(monkeypatch):
    from aiayn.training import build

    cpu = torch.device("cpu")
    for kernels in (True, False):
        monkeypatch.setattr(build, "native_bf16", lambda k=kernels: k)
        assert build.autocast_dtype("auto", cpu) is None and build.autocast_dtype("fp32", cpu) is None
        with pytest.raises(ValueError, match="fp16 autocast needs a CUDA device"):
            build.autocast_dtype("fp16", cpu)
    monkeypatch.setattr(build, "native_bf16", lambda: True)
    assert build.autocast_dtype("bf16", cpu) == torch.bfloat16
    monkeypatch.setattr(build, "native_bf16", lambda: False)  # emulated bf16 would crawl: fp32
    assert build.autocast_dtype("bf16", cpu) is None


def test_bf16_on_a_cpu_without_bf16_instructions_trains_in_fp32_and_says_so(tmp_path, monkeypatch, capsys):
    from aiayn.training import build

    monkeypatch.setattr(build, "native_bf16", lambda: False)
    cfg = TrainConfig.from_dict({**TINY, "output": str(tmp_path / "run"), "max_steps": 2, "eval_every": 2,
                                 "precision": "bf16", "keep_last": 0})
    trainer = Trainer(cfg)
    assert trainer.amp is None
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and first["precision"] == "fp32"
    assert "bf16 was asked for, but this CPU has no bfloat16 instructions" in capsys.readouterr().out


def test_bf16_autocast_on_cpu_trains_fp32_weights(tmp_path, monkeypatch):
    from aiayn.training import build

    monkeypatch.setattr(build, "native_bf16", lambda: True)  # autocast on any CPU (slow where emulated)
    cfg = TrainConfig.from_dict({**TINY, "output": str(tmp_path / "bf16"), "max_steps": 60, "eval_every": 60,
                                 "precision": "bf16", "keep_last": 0})
    trainer = Trainer(cfg)
    trainer.train()
    records = [json.loads(x) for x in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["precision"] == "bf16"
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < 0.8 * losses[0], losses  # mixed precision still learns
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # master weights stay fp32
    saved = load_file(str(tmp_path / "bf16" / "last" / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in saved.values())


def test_recipe_values_are_checked_against_their_types(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("lr: 2e-3\nwarmup: 10\n")  # YAML 1.1 reads 2e-3 (no dot) as text: it must still be a number
    assert TrainConfig.from_yaml(path).lr == 0.002
    for line, field in [("lr: fast", "field lr must be a number"), ("max_steps: 1.5", "field max_steps must be"),
                        ("joint_vocab: 3", "field joint_vocab must be"), ("warmup: true", "field warmup must be")]:
        path.write_text(line + "\n")
        with pytest.raises(ValueError, match=f"{path}: {field}"):
            TrainConfig.from_yaml(path)


def test_negative_weight_decay_and_rdrop_are_refused():
    with pytest.raises(ValueError, match="weight_decay: must be >= 0"):
        TrainConfig(weight_decay=-0.1)
    with pytest.raises(ValueError, match="rdrop: must be >= 0"):
        TrainConfig(rdrop=-1.0)
    with pytest.raises(ValueError, match="rdrop: R-Drop needs task translation"):
        TrainConfig(rdrop=1.0, task="lm")


def test_subword_dropout_values_are_checked():
    for changes, message in [({"subword_dropout": 1.0}, "must be in"),
                             ({"subword_dropout": 0.1, "tokenizer_type": "unigram"}, "tokenizer_type bpe"),
                             ({"subword_dropout": 0.1, "task": "lm"}, "task translation")]:
        with pytest.raises(ValueError, match=f"subword_dropout: .*{message}"):
            TrainConfig(**changes)


class Killed(BaseException):
    """Stands for SIGKILL in the middle of writing a checkpoint."""


def test_a_kill_while_saving_is_repaired_on_resume(tmp_path, monkeypatch):
    import aiayn.training.state as trainer_module  # the one writer of a run's checkpoints

    cfg = TrainConfig.from_yaml(write_recipe(tmp_path, "k", max_steps=20, eval_every=10, bleu_sentences=0))
    real = trainer_module.save_checkpoint

    def dies_at_last_of_step_20(folder, *args, **kwargs):
        if folder.name == "last" and len(args) > 2 and args[3]["step"] == 20:
            (folder.parent / ".last.abc.tmp").mkdir()  # what a real kill leaves behind
            raise Killed
        real(folder, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "save_checkpoint", dies_at_last_of_step_20)
    with pytest.raises(Killed):
        Trainer(cfg).train()
    run = tmp_path / "k"
    assert json.loads((run / "last" / "trainer.json").read_text())["step"] == 10  # last/ is still whole
    monkeypatch.setattr(trainer_module, "save_checkpoint", real)
    Trainer(cfg, resume=True).train()
    assert json.loads((run / "last" / "trainer.json").read_text())["step"] == 20
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000010", "step_00000020"]
    assert not list(run.glob(".*tmp*"))


def test_a_fresh_start_after_a_kill_before_the_first_checkpoint_logs_once(tmp_path):
    cfg = TrainConfig.from_yaml(write_recipe(tmp_path, "f", max_steps=5, eval_every=5, bleu_sentences=0))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "metrics.jsonl").write_text('{"step": 0, "data": {"train_pairs": 1}}\n')
    Trainer(cfg).train()
    records = [json.loads(x) for x in (tmp_path / "f" / "metrics.jsonl").read_text().splitlines()]
    assert sum("data" in r for r in records) == 1 and records[0]["data"]["train_pairs"] > 1


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_is_valid(path):
    cfg = TrainConfig.from_yaml(path)
    if path.name.startswith("wmt14"):  # the paper's settings (section 5)
        assert (cfg.schedule, cfg.warmup, cfg.label_smoothing, cfg.src_lang, cfg.tgt_lang) == \
            ("noam", 4000, 0.1, "en", "de")
        assert cfg.max_tokens * cfg.accum == 25000 and cfg.preset in ("base", "big")
        assert cfg.keep_last == (5 if cfg.preset == "base" else 20)


def test_training_runs_on_each_device(tmp_path, device_name):
    """The whole loop on the device (CUDA: bf16/fp16 autocast by `precision: auto`); the checkpoint loads
    on the CPU and its loss fell."""
    cfg = TrainConfig.from_dict({**TINY, "output": str(tmp_path / "run"), "max_steps": 40, "eval_every": 20,
                                 "device": device_name, "precision": "auto"})
    Trainer(cfg).train()
    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if "valid_loss" in x]
    assert len(evals) == 2 and evals[1]["valid_loss"] < evals[0]["valid_loss"]
    from aiayn.inference.translator import Translator

    assert len(Translator.from_checkpoint(tmp_path / "run", "cpu").translate(["a b c"])) == 1


def test_a_recipe_is_a_path_or_the_name_of_one_aiayn_carries(tmp_path, monkeypatch):
    from aiayn.training.config import recipe_path

    assert (Path(__file__).resolve().parents[2] / "configs").resolve() == RECIPES  # the checkout's configs/ link
    assert recipe_path("multi30k-de-en") == recipe_path("multi30k-de-en.yaml") == RECIPES / "multi30k-de-en.yaml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "multi30k-de-en.yaml").write_text("data: reverse\n")  # a file of the user's own wins
    assert recipe_path("multi30k-de-en.yaml") == Path("multi30k-de-en.yaml")
    assert read_recipe("multi30k-de-en.yaml") == {"data": "reverse"}
    assert read_recipe("multi30k-de-en")["data"] == "multi30k"
    with pytest.raises(ValueError, match=r"^nope/multi30k-de-en: config file not found \(a path, or one of the "
                                         r"recipes aiayn carries: multi30k-both, .*shakespeare-char.*\)$"):
        recipe_path("nope/multi30k-de-en")  # a path with a folder is never a packaged name
