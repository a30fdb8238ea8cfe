"""Masks, one convention: bool, True = may attend."""

import pytest
import torch

from aiayn.model.masks import causal_mask, decoder_self_mask, key_mask, left_align, padding_mask


def test_padding_and_key_masks():
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = padding_mask(ids, 0)
    assert mask.tolist() == [[True, True, False], [True, False, False]]
    assert key_mask(mask).shape == (2, 1, 1, 3)


def test_causal_mask_with_and_without_a_cache():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]  # the newest query sees every key
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def test_decoder_self_mask_combines_causal_and_padding():
    assert decoder_self_mask(None, 1, 5, torch.device("cpu")) is None
    keys = torch.tensor([[True, True, False]])
    mask = decoder_self_mask(keys, 3, 3, torch.device("cpu"))
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]


def test_left_align_moves_padding_to_the_front():
    ids = torch.tensor([[5, 6, 7], [8, 0, 0], [9, 4, 0]])
    aligned, left_pad = left_align(ids, 0)
    assert aligned.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 4]] and left_pad.tolist() == [0, 2, 1]
    same, none = left_align(ids[:1], 0)
    assert (none is None and same is ids[:1]) or torch.equal(same, ids[:1])
    with pytest.raises(ValueError, match="row 1 has no tokens"):
        left_align(torch.tensor([[5], [0]]), 0)
