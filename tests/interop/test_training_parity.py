"""An imported model trains as it would at home: on a Llama-shaped model built with ``transformers``, dropout
off, the same batches in the same order and the same learning rate, aiayn's trainer (its loss, gradient
normalisation, clipping and Adam) and a plain PyTorch loop over the Hugging Face model give the same loss at
each of the first 20 steps (within 1e-4 relative, float32); the same for LoRA against PEFT."""

import pytest
import torch
import torch.nn.functional as F

from aiayn.cli import main
from aiayn.training.config import TrainConfig
from aiayn.training.trainer import Trainer

STEPS = 20


@pytest.fixture(scope="module")
def llama(tmp_path_factory, make_llama):
    folder = make_llama(tmp_path_factory.mktemp("parity") / "hf", "llama")
    assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
    text = folder.parent / "text.txt"
    g = torch.Generator().manual_seed(3)
    text.write_text("".join(" ".join(f"w{i}" for i in torch.randint(3, 120, (11,), generator=g).tolist()) + "\n"
                            for _ in range(120)))
    return folder, folder.parent / "ckpt", text


def _trainer(llama, tmp_path, **changes) -> Trainer:
    _, ckpt, text = llama
    return Trainer(TrainConfig(data=str(text), task="lm", init_from=str(ckpt), output=str(tmp_path / "run"),
                               block_size=12, max_tokens=48, max_steps=STEPS, schedule="inverse_sqrt", lr=3e-3,
                               warmup=5, label_smoothing=0.0, clip_norm=1.0, device="cpu", eval_every=1000,
                               keep_last=0, **changes))


def _both(trainer: Trainer, hf, params) -> list[tuple[float, float]]:
    """Train both on the trainer's first batches; the (aiayn, Hugging Face) loss of every step."""
    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    losses = []
    for step, indices in enumerate(trainer.task.batches(0)[:STEPS], start=1):
        lr = trainer.lr(step)
        for group in (*trainer.optimizer.param_groups, *optimizer.param_groups):
            group["lr"] = lr
        ours, _ = trainer.train_step([indices])
        batch = trainer.task.collate(indices)  # (B, L + 1) token ids, no padding
        theirs = F.cross_entropy(hf(batch[:, :-1]).logits.flatten(0, 1), batch[:, 1:].flatten())
        theirs.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append((ours, theirs.item()))
    return losses


def test_full_fine_tuning_loss_equals_a_plain_loop_over_transformers(llama, tmp_path):
    import transformers

    trainer = _trainer(llama, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama[0]).train()
    losses = _both(trainer, hf, [p for p in hf.parameters() if p.requires_grad])
    assert len(losses) == STEPS and losses[-1][1] < losses[0][1]  # it learns
    for step, (ours, theirs) in enumerate(losses, start=1):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (step, ours, theirs)


def _peft_like(trainer: Trainer, hf) -> list:
    """Give the PEFT model aiayn's random A (B is zero on both sides); its trained parameters, as many as
    aiayn's."""
    from aiayn.interop.peft import hf_modules
    from aiayn.model.lora import lora_layers

    names, theirs = hf_modules(trainer.model.config), dict(hf.named_parameters())
    with torch.no_grad():
        for path, layer in lora_layers(trainer.model).items():
            theirs[f"base_model.model.{names[path]}.lora_A.default.weight"].copy_(layer.lora_A.weight)
    trained = [p for p in hf.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trained) == sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return trained


def test_lora_loss_equals_peft(llama, tmp_path):
    import transformers

    peft = pytest.importorskip("peft")

    trainer = _trainer(llama, tmp_path, lora_r=4, lora_alpha=8.0, lora_targets="q,v,ffn")
    base = transformers.AutoModelForCausalLM.from_pretrained(llama[0])
    hf = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=[
        "q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"])).train()
    losses = _both(trainer, hf, _peft_like(trainer, hf))
    assert losses[-1][1] < losses[0][1]
    for step, (ours, theirs_loss) in enumerate(losses, start=1):
        assert abs(ours - theirs_loss) <= 1e-4 * abs(theirs_loss), (step, ours, theirs_loss)


@pytest.fixture
def marian(tmp_path, make_marian):
    """A small Marian built with transformers (dropout off), imported; a tiny de-en corpus."""
    import json

    texts = ["Ein Mann fährt ein Pferd.", "A man rides a horse.", "Zwei Hunde spielen im Schnee.",
             "Two dogs play in the snow.", "Eine Frau liest ein Buch.", "A woman reads a book."]
    folder = make_marian(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dropout": 0.0, "attention_dropout": 0.0,
                                                    "activation_dropout": 0.0}))
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    for lang, offset in (("de", 0), ("en", 1)):
        (tmp_path / f"d.{lang}").write_text("\n".join(texts[offset::2] * 60) + "\n")
    return folder, tmp_path


def _marian_trainer(marian, **changes) -> Trainer:
    _, tmp_path = marian
    recipe = {"data": str(tmp_path / "d"), "src_lang": "de", "tgt_lang": "en", "valid": str(tmp_path / "d"),
              "init_from": str(tmp_path / "ckpt"), "output": str(tmp_path / "run"), "max_tokens": 200,
              "max_steps": STEPS, "schedule": "inverse_sqrt", "lr": 3e-3, "warmup": 5, "label_smoothing": 0.0,
              "clip_norm": 0.0, "device": "cpu", "eval_every": 1000, "keep_last": 0}
    return Trainer(TrainConfig(**{**recipe, **changes}))


def _marian_both(trainer: Trainer, hf, params) -> list[tuple[float, float]]:
    """Train both on the trainer's first batches (Marian's decoder starts from the pad id); every step's
    (aiayn, Hugging Face) loss."""
    from aiayn.training.objective import shift_target

    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    pad, eos = trainer.model.config.pad_id, trainer.model.config.eos_id
    losses = []
    for step, indices in enumerate(trainer.task.batches(0)[:STEPS], start=1):
        for group in (*trainer.optimizer.param_groups, *optimizer.param_groups):
            group["lr"] = trainer.lr(step)
        ours, _ = trainer.train_step([indices])
        src, tgt = trainer.task.collate(indices)
        tgt_in, labels = shift_target(tgt, pad, eos)
        keys = tgt_in != pad
        keys[:, 0] = True  # the start token is the pad id, and a real key
        logits = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt_in,
                    decoder_attention_mask=keys.long()).logits
        theirs = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad)
        theirs.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append((ours, theirs.item()))
    return losses


def test_marian_fine_tuning_loss_equals_a_plain_loop_over_transformers(marian):
    """Hugging Face's Marian keeps ``final_logits_bias`` as a fixed buffer: ``--freeze output_bias`` is its
    training. Marian's positions are fixed sinusoids (the Marian toolkit's, and transformers 4's table did not
    train); transformers 5 makes the table an ordinary parameter, so the plain loop leaves it out, as aiayn
    computes the sinusoids."""
    import transformers

    trainer = _marian_trainer(marian, freeze="output_bias")
    hf = transformers.MarianMTModel.from_pretrained(marian[0]).train()
    losses = _marian_both(trainer, hf, [p for name, p in hf.named_parameters()
                                        if p.requires_grad and "embed_positions" not in name])
    assert len(losses) == STEPS and losses[-1][1] < losses[0][1]  # it learns
    for step, (ours, theirs) in enumerate(losses, start=1):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (step, ours, theirs)


def test_marian_lora_loss_equals_peft(marian):
    import transformers

    peft = pytest.importorskip("peft")

    trainer = _marian_trainer(marian, lora_r=4, lora_alpha=8.0, lora_targets="q,v,ffn", lr=2e-2)
    base = transformers.MarianMTModel.from_pretrained(marian[0])
    hf = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                   target_modules=["q_proj", "v_proj", "fc1", "fc2"])).train()
    losses = _marian_both(trainer, hf, _peft_like(trainer, hf))
    assert len(losses) == STEPS and losses[-1][1] < losses[0][1]
    for step, (ours, theirs_loss) in enumerate(losses, start=1):
        assert abs(ours - theirs_loss) <= 1e-4 * abs(theirs_loss), (step, ours, theirs_loss)
