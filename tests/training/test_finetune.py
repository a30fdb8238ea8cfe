"""Fine-tuning from a checkpoint: the checkpoint's model, weights and tokenizer are the start (an lr of 0 keeps
them exactly), the optimizer is fresh, the recipe may not contradict the checkpoint, frozen parts stay as they
were, and resuming a fine-tuning run continues it."""

import json

import pytest
import torch

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.training.finetune import freeze, warn_unknown

TEXT = "".join(f"the bird flew over a house {i % 7} . my friend read a book .\n" for i in range(200))


def _tune(lm_run, tmp_path, *flags) -> list[str]:
    (tmp_path / "new.txt").write_text(TEXT)
    return ["train", "--task", "lm", "--data", str(tmp_path / "new.txt"), "--init-from", str(lm_run),
            "--output", str(tmp_path / "tuned"), "--block-size", "32", "--max-tokens", "256", "--max-steps", "20",
            "--eval-every", "20", "--keep-last", "0", "--warmup", "1", "--device", "cpu", *flags]


def _weights(folder) -> dict:
    return {k: v.clone() for k, v in load_checkpoint(folder)[0].state_dict().items()}


def test_a_zero_learning_rate_keeps_the_checkpoint_exactly(lm_run, tmp_path):
    assert main(_tune(lm_run, tmp_path, "--schedule", "constant", "--lr", "0")) == 0
    before, after = _weights(lm_run), _weights(tmp_path / "tuned")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert (tmp_path / "tuned" / "tokenizer").is_dir()  # the checkpoint's tokenizer, kept for resuming
    assert (tmp_path / "tuned" / "tokenizer" / "tokenizer.model").read_bytes() == \
        (lm_run / "best" / "tokenizer.model").read_bytes()


def test_fine_tuning_starts_from_the_checkpoint_not_from_scratch(lm_run, tmp_path):
    from conftest import PLANTED  # the text the checkpoint learnt: its loss starts low, a fresh model's at ln V

    args = _tune(lm_run, tmp_path, "--schedule", "constant", "--lr", "1e-3", "--log-every", "1",
                 "--label-smoothing", "0")
    (tmp_path / "new.txt").write_text(PLANTED)
    assert main(args) == 0
    records = [json.loads(x) for x in (tmp_path / "tuned" / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in records if "loss" in r)
    vocab = load_checkpoint(lm_run)[0].config.vocab_size
    assert first["loss"] < 0.3 * torch.log(torch.tensor(float(vocab))).item()  # far below a fresh model's ln V
    before, after = _weights(lm_run), _weights(tmp_path / "tuned")
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("flags, words", [
    (["--vocab-size", "500"], "drop vocab_size"), (["--preset", "base"], "drop preset"),
    (["--tokenizer-type", "char"], "drop tokenizer_type"), (["--task", "mlm"], "mlm needs an encoder-only checkpoint"),
])
def test_a_recipe_that_contradicts_the_checkpoint_is_refused_by_name(lm_run, tmp_path, capsys, flags, words):
    args = _tune(lm_run, tmp_path, *flags)
    if "--task" in flags:  # the later --task wins
        args = args[:1] + args[3:]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "tuned" / "last").exists()


def test_frozen_parts_stay_as_they_were(lm_run, tmp_path):
    assert main(_tune(lm_run, tmp_path, "--freeze", "embeddings,layers:0-0", "--lr", "3e-3", "--schedule",
                      "constant")) == 0
    before, after = _weights(lm_run), _weights(tmp_path / "tuned")
    frozen = [k for k in before if k.startswith(("embed.", "decoder.layers.0.")) or k == "output.weight"]
    trained = [k for k in before if k.startswith("decoder.layers.1.")]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)  # the tied output is the embedding
    assert trained and any(not torch.equal(before[k], after[k]) for k in trained)


def test_freeze_names_parts_the_model_does_not_have(lm_run):
    model, _ = load_checkpoint(lm_run)
    with pytest.raises(ValueError, match="no 'encoder'"):
        freeze(model, "encoder")
    with pytest.raises(ValueError, match="unknown part 'heads'"):
        freeze(model, "heads")
    names = freeze(model, "layers:1")
    assert names and all(n.startswith("decoder.layers.1.") for n in names)
    assert all(not p.requires_grad for n, p in model.named_parameters() if n in names)


def test_text_the_tokenizer_does_not_know_is_a_warning(capsys):
    class Words:
        def encode(self, text):
            return [7 if w in ("a", "b") else 3 for w in text.split()]

    assert warn_unknown(["a b", "a x"], Words(), 3, "CKPT") == 0.25
    assert "25.0% of the training tokens are unknown to the tokenizer of CKPT" in capsys.readouterr().err
    assert warn_unknown(["a b"], Words(), 3, "CKPT") == 0.0 and capsys.readouterr().err == ""


def test_resuming_a_fine_tuning_run_continues_it(lm_run, tmp_path):
    args = _tune(lm_run, tmp_path, "--freeze", "embeddings", "--lr", "3e-3")
    args[args.index("--max-steps") + 1] = args[args.index("--eval-every") + 1] = "10"
    assert main(args) == 0
    assert main(["train", "--resume", "--output", str(tmp_path / "tuned"), "--max-steps", "20"]) == 0
    assert json.loads((tmp_path / "tuned" / "last" / "trainer.json").read_text())["step"] == 20
    before, after = _weights(lm_run), _weights(tmp_path / "tuned" / "last")
    assert torch.equal(before["embed.tokens.weight"], after["embed.tokens.weight"])  # still frozen after resume
    assert not torch.equal(before["decoder.layers.1.ffn.linear1.weight"], after["decoder.layers.1.ffn.linear1.weight"])


@pytest.mark.long  # torchrun: two processes (make test-long)
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_fine_tuning_under_torchrun_with_accumulation_bf16_and_averaging(lm_run, tmp_path, sharding):
    """Two processes (DDP, or FSDP with --fsdp), accumulation 2, bf16 autocast, frozen embeddings; then
    `aiayn average` of the run's last three step checkpoints."""
    from safetensors.torch import load_file

    from tiny_runs import torchrun

    args = _tune(lm_run, tmp_path, "--accum", "2", "--precision", "bf16", "--freeze", "embeddings", "--lr", "3e-3",
                 "--eval-every", "5", "--keep-last", "3", *(["--fsdp"] if sharding == "fsdp" else []))
    result = torchrun(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = _weights(lm_run), _weights(tmp_path / "tuned" / "last")
    assert torch.equal(before["embed.tokens.weight"], after["embed.tokens.weight"])
    assert not torch.equal(before["decoder.layers.1.ffn.linear1.weight"], after["decoder.layers.1.ffn.linear1.weight"])
    assert main(["average", "--run", str(tmp_path / "tuned"), "--last", "3", "--output", str(tmp_path / "avg")]) == 0
    folders = sorted((tmp_path / "tuned" / "checkpoints").iterdir())
    steps = [load_file(str(folder / "model.safetensors")) for folder in folders]
    assert len(steps) == 3
    averaged = load_file(str(tmp_path / "avg" / "model.safetensors"))
    name = "decoder.layers.1.ffn.linear1.weight"
    assert torch.allclose(averaged[name], sum(s[name] for s in steps) / 3, atol=1e-6)
