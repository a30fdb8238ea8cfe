"""``load_checkpoint``: what every product does with a checkpoint first: its files checked once, the tokenizers
read before the weights (a big tokenizer's parse gives its memory back before the weights arrive), the model made
the inference copy as it is read."""

import pytest

from aiayn.inference import load
from aiayn.inference.precision import converter

from conftest import chat_checkpoint


def test_the_tokenizers_are_read_and_their_memory_given_back_before_the_weights_once_checked(tmp_path, monkeypatch):
    folder = chat_checkpoint(tmp_path / "ckpt")
    calls = []
    for name in ("verify_checkpoint", "load_tokenizers", "give_back_memory", "load_model"):
        real = getattr(load, name)
        monkeypatch.setattr(load, name, lambda *a, _real=real, _name=name, **k: calls.append((_name, k.get(
            "verify"))) or _real(*a, **k))
    model, tokenizers = load.load_checkpoint(folder, "decoder-only", convert=converter(int4=True))
    assert calls == [("verify_checkpoint", None), ("load_tokenizers", None), ("give_back_memory", None),
                     ("load_model", False)]  # the weights' checksums checked once, not twice
    assert tokenizers.src.encode("hello") and type(model.output).__name__ == "Int8Linear"


def test_a_damaged_weights_file_is_still_named_before_anything_is_read(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors: checksum mismatch"):
        load.load_checkpoint(folder, "decoder-only")
