"""Checkpoint averaging (section 6.1): the mean of the weights, with the config and tokenizer kept."""

import pytest
import torch

from aiayn import EncoderDecoder, load_model
from aiayn.io.run import RunFolder
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer
from aiayn.training.average import average_checkpoints

from conftest import tiny


def test_average_is_the_mean_of_the_weights(tmp_path):
    tokenizers = SentencePiecePair(SentencePieceTokenizer.train(["a b c d"] * 20, vocab_size=270))
    folders = []
    for seed in range(3):
        torch.manual_seed(seed)
        model = EncoderDecoder(tiny())
        folder = RunFolder(tmp_path / "run").step(seed * 100)
        model.save(folder)
        tokenizers.save(folder)
        folders.append(folder)
    assert folders[1] == tmp_path / "run" / "checkpoints" / "step_00000100"
    assert RunFolder(tmp_path / "run").steps() == folders
    average_checkpoints(folders, tmp_path / "avg")
    merged = load_model(tmp_path / "avg")
    models = [load_model(f) for f in folders]
    name = "encoder.layers.0.ffn.linear1.weight"
    expected = sum(m.state_dict()[name] for m in models) / 3
    torch.testing.assert_close(merged.state_dict()[name], expected)
    assert (tmp_path / "avg" / "tokenizer.model").is_file()
    EncoderDecoder(tiny(d_model=32)).save(tmp_path / "other")
    with pytest.raises(ValueError, match="different configs"):
        average_checkpoints([folders[0], tmp_path / "other"], tmp_path / "bad")
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        average_checkpoints([], tmp_path / "none")
