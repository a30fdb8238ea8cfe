"""Several end ids (Llama 3's and Qwen2's end-of-text and end-of-turn tokens): any of them ends a row as EOS does,
in every strategy, and none is generated before ``min_new_tokens``."""

import pytest
import torch

from aiayn import generate
from aiayn.model.config import ModelConfig

from conftest import A, B, ScriptedModel


def scripted(stop_ids=()) -> ScriptedModel:
    model = ScriptedModel()
    model.config = model.config.replace(stop_ids=stop_ids)
    return model


def test_a_stop_id_ends_greedy_search_as_eos_does():
    src = torch.tensor([[7]])
    assert generate(scripted(), src, "greedy", max_new_tokens=5, use_cache=False) == [[A, B]]
    assert generate(scripted((B,)), src, "greedy", max_new_tokens=5, use_cache=False) == [[A]]  # B ends the row


def test_no_stop_id_before_min_new_tokens():
    out = generate(scripted((B,)), torch.tensor([[7]]), "greedy", max_new_tokens=5, min_new_tokens=2,
                   use_cache=False)
    assert out == [[A, A]]  # B and EOS forbidden at both steps: A, then A (0.1) over nothing else


def test_beam_and_sampling_end_at_a_stop_id():
    """A stop id ends the row where it is drawn: each seeded sample with ``stop_ids`` is the same seed's sample
    without them, cut before its first stop id (so "ends the row" is told from "never generates it")."""
    src = torch.tensor([[7]])
    beams = generate(scripted((B,)), src, "beam", beam_size=2, num_return_sequences=2, max_new_tokens=5,
                     use_cache=False)
    assert beams and all(B not in row for row in beams)
    cut = 0
    for seed in range(8):
        free = generate(scripted(), src, "sample", seed=seed, max_new_tokens=5, use_cache=False)[0]
        row = generate(scripted((B,)), src, "sample", seed=seed, max_new_tokens=5, use_cache=False)[0]
        assert row == (free[:free.index(B)] if B in free else free), (seed, free, row)
        cut += B in free
    assert cut >= 2, "the seeds never drew the stop id: nothing was tested"


def test_stop_ids_are_checked_and_read_back_from_json():
    cfg = ModelConfig.from_dict({"vocab_size": 10, "stop_ids": [5, 6]})
    assert cfg.stop_ids == (5, 6) and cfg.end_ids == (2, 5, 6)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ([10], [0], ["x"]):
        with pytest.raises(ValueError, match="stop_ids"):
            ModelConfig.from_dict({"vocab_size": 10, "stop_ids": bad})
