"""LoRA adapters in PEFT's format, both ways: an adapter aiayn trains on an imported Llama or Marian model loads
with ``PeftModel.from_pretrained`` on the Hugging Face model and gives the same logits (1e-5), an adapter PEFT
made loads into aiayn equally; ``aiayn merge`` equals the unmerged adapter; ``--adapter`` on the commands;
bad adapter folders are one line."""

import json
import subprocess
import sys

import pytest
import torch

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.interop.peft import load_adapter, save_adapter
from aiayn.model.lora import apply_lora

from conftest import run_main

peft = pytest.importorskip("peft")


def _randomise_b(model):
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)


@pytest.fixture(scope="module")
def llama(tmp_path_factory, make_llama):
    folder = make_llama(tmp_path_factory.mktemp("peft-llama") / "hf", "llama")
    assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
    return folder, folder.parent / "ckpt"


@pytest.fixture(scope="module")
def marian_pair(tmp_path_factory, make_marian):
    folder = make_marian(tmp_path_factory.mktemp("peft-marian"))
    assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
    return folder, folder.parent / "ckpt"


def _hf(folder):
    import transformers

    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    return getattr(transformers, architecture).from_pretrained(folder).eval()


def _logits(model, hf, ids):
    with torch.no_grad():
        if model.config.arch == "encoder-decoder":
            tgt = torch.full((ids.size(0), 1), model.config.bos_id)
            tgt = torch.cat([tgt, ids[:, :4]], dim=1)
            return model(ids, tgt), hf(input_ids=ids, decoder_input_ids=tgt).logits
        return model(ids)[..., : hf.config.vocab_size], hf(ids).logits


@pytest.mark.parametrize("which", ["llama", "marian_pair"])
def test_an_aiayn_adapter_loads_in_peft_with_the_same_logits(request, tmp_path, which):
    folder, ckpt = request.getfixturevalue(which)
    model, _ = load_checkpoint(ckpt)
    apply_lora(model, r=4, alpha=8.0, targets="q,k,v,o,ffn")
    _randomise_b(model)
    (tmp_path / "adapter").mkdir()
    save_adapter(model, tmp_path / "adapter", base=str(folder))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8.0
    hf = peft.PeftModel.from_pretrained(_hf(folder), tmp_path / "adapter").eval()
    ids = torch.randint(5, 40, (2, 9))
    ours, theirs = _logits(model.eval(), hf, ids)
    assert (ours - theirs).abs().max() <= 1e-5
    base_ours, _ = _logits(load_checkpoint(ckpt)[0], hf, ids)
    assert (base_ours - theirs).abs().max() > 1e-3  # the adapter changes the model


def test_a_peft_adapter_loads_into_aiayn(llama, tmp_path):
    folder, ckpt = llama
    hf = peft.get_peft_model(_hf(folder), peft.LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "v_proj",
                                                                                           "down_proj"]))
    _randomise_b(hf)
    hf.save_pretrained(tmp_path / "adapter")
    model, _ = load_checkpoint(ckpt)
    wrapped = load_adapter(model, tmp_path / "adapter")
    assert len(wrapped) == 6 and any(p.endswith("ffn.down_proj") for p in wrapped)
    ours, theirs = _logits(model.eval(), hf.eval(), torch.randint(5, 100, (2, 9)))
    assert (ours - theirs).abs().max() <= 1e-5


def test_merge_and_the_adapter_flag(llama, tmp_path, capsys):
    _, ckpt = llama
    model, _ = load_checkpoint(ckpt)
    apply_lora(model, r=4, alpha=8.0)
    _randomise_b(model)
    (tmp_path / "adapter").mkdir()
    save_adapter(model, tmp_path / "adapter", base=str(ckpt))
    assert main(["merge", "--checkpoint", str(ckpt), "--adapter", str(tmp_path / "adapter"), "--output",
                 str(tmp_path / "merged")]) == 0
    merged, _ = load_checkpoint(tmp_path / "merged")
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        assert (merged(ids) - model.eval()(ids)).abs().max() <= 1e-5
        assert (merged(ids) - load_checkpoint(ckpt)[0].eval()(ids)).abs().max() > 1e-3  # the adapter changes it
    capsys.readouterr()
    common = ["--prompt", "w5 w6 w7", "--temperature", "0", "--max-new-tokens", "8"]
    assert main(["generate", "--checkpoint", str(tmp_path / "merged"), *common]) == 0
    merged_text = capsys.readouterr().out
    assert main(["generate", "--checkpoint", str(ckpt), "--adapter", str(tmp_path / "adapter"), *common]) == 0
    assert capsys.readouterr().out == merged_text


@pytest.mark.parametrize("how, words", [("rank", "has shape"), ("module", "has no module"),
                                        ("dora", "use_dora (DoRA) is not supported"), ("config", "missing"),
                                        ("truncated", "not a safetensors file, damaged or truncated"),
                                        ("shape", "has shape (4, 7)")])
def test_bad_adapter_folders_are_one_line(llama, tmp_path, capsys, how, words):
    from safetensors.torch import load_file, save_file

    _, ckpt = llama
    model, _ = load_checkpoint(ckpt)
    apply_lora(model, r=4, alpha=8.0, targets="q")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_adapter(model, adapter, base=str(ckpt))
    config = json.loads((adapter / "adapter_config.json").read_text())
    if how == "rank":
        (adapter / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    elif how == "module":
        tensors = load_file(str(adapter / "adapter_model.safetensors"))
        save_file({k.replace("q_proj", "qkv_proj"): v for k, v in tensors.items()},
                  str(adapter / "adapter_model.safetensors"))
    elif how == "dora":
        (adapter / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    elif how == "truncated":
        data = (adapter / "adapter_model.safetensors").read_bytes()
        (adapter / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    elif how == "shape":
        tensors = load_file(str(adapter / "adapter_model.safetensors"))
        first = next(k for k in tensors if k.endswith("lora_A.weight"))
        save_file({**tensors, first: torch.zeros(4, 7)}, str(adapter / "adapter_model.safetensors"))
    else:
        (adapter / "adapter_config.json").unlink()
    capsys.readouterr()
    assert main(["merge", "--checkpoint", str(ckpt), "--adapter", str(adapter), "--output",
                 str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "m").exists()
    done = run_main("generate", "--checkpoint", str(ckpt), "--adapter", str(adapter), "--prompt", "w5")
    assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr
    if how not in ("rank", "truncated"):
        return  # the server reads an adapter with generate's reader: a mistake in its config and one in its file
    for command in (["serve", "--checkpoint", str(ckpt), "--adapter", str(adapter), "--port", "0"],
                    ["serve", "--checkpoint", str(ckpt), "--lora", f"bad={adapter}", "--port", "0"]):
        # the server refuses to start (a timeout here would mean it served the base model instead)
        done = subprocess.run([sys.executable, "-m", "aiayn", *command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, (command, done.stderr)
