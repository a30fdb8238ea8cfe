"""The decoding core: length policy, forbidden tokens, cutting rows, and the model step interface."""

import pytest
import torch

from aiayn import EncoderOnly, build_model
from aiayn.decoding.core import Stepper, forbid, length_limits, never_generated, strip

from conftest import random_ids, tiny


def test_length_limits_policy_and_caps():
    src = torch.tensor([[5, 6, 0, 0], [5, 6, 7, 8], [5, 0, 0, 0]])
    assert length_limits(src, 0, max_len_a=1.5, max_len_b=10).tolist() == [13, 16, 11]
    assert length_limits(src, 0, 12, max_len_a=1.5, max_len_b=10).tolist() == [12, 12, 11]
    assert length_limits(src, 0, torch.tensor([1, 20, 0])).tolist() == [1, 20, 0]
    assert length_limits(src, 0, 7).tolist() == [7, 7, 7]
    with pytest.raises(ValueError, match="max_new_tokens"):
        length_limits(src, 0)


def test_forbid_and_strip():
    cfg = tiny()
    logits = forbid(torch.zeros(2, 3, cfg.vocab_size), cfg, no_eos=True)
    for tok in (cfg.bos_id, cfg.pad_id, cfg.eos_id):
        assert torch.isinf(logits[..., tok]).all()
    assert torch.isfinite(logits[..., cfg.unk_id]).all()
    assert not torch.isinf(forbid(torch.zeros(1, cfg.vocab_size), cfg, no_eos=False)[0, cfg.eos_id])
    assert strip([5, 6, 2, 7], 2) == [5, 6] and strip([5, 0, 6], 2) == [5, 0, 6] and strip([5], 2) == [5]
    lm = cfg.replace(arch="decoder-only", n_encoder_layers=0)
    assert never_generated(lm) == (lm.pad_id,) and never_generated(lm.replace(pad_is_token=True)) == ()


def test_stepper_drives_both_generating_members_through_one_interface(model):
    src = random_ids(3, 5, vocab=30)
    step = Stepper(model, src, max_new_tokens=4, beams=2)
    assert step.start_tokens.tolist() == [[1]] * 6  # BOS for 3 sources x 2 beams
    assert step(step.start_tokens).shape == (6, 30) and step.cache.position == 1


def test_a_member_that_cannot_generate_says_so():
    with pytest.raises(TypeError, match="cannot generate"):
        Stepper(EncoderOnly(tiny(arch="encoder-only")), random_ids(1, 4), 3)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_a_step_for_the_last_column_equals_the_last_column_of_the_full_step(arch):
    """``step(..., last=True)`` (what greedy, beam and sampling ask for) skips the output projection of a prompt's
    other columns and gives the same last-column logits."""
    torch.manual_seed(0)
    model = build_model(tiny(arch=arch)).eval()
    src = random_ids(2, 6)
    with torch.no_grad():
        full_tokens, full_state = model.start(src, 4)
        last_tokens, last_state = model.start(src, 4)
        full = model.step(full_tokens, full_state)  # (B, t0, V)
        last = model.step(last_tokens, last_state, last=True)  # (B, 1, V)
    assert last.shape == (2, 1, full.size(-1))
    torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=1e-5)
    assert last_state.position == full_state.position  # the cache holds every column either way
