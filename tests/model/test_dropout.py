"""aiayn's Dropout: nn.Dropout's distribution and scaling, with the mask drawn 16 bits at a time on CPU."""

import math

import pytest
import torch
from torch import nn

from aiayn import EncoderDecoder, ModelConfig
from aiayn.model.dropout import Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_each_element_is_dropped_with_probability_p_in_every_lane(p):
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([1000, 1001]), p)  # odd size: the last draw is cut
    assert keep.shape == (1000, 1001) and keep.dtype == torch.bool
    n = keep.numel()
    lanes = keep.flatten()[: n - n % 4].view(-1, 4)  # the four 16-bit uniforms of each 64-bit draw
    sd = math.sqrt(p * (1 - p) / lanes.shape[0])
    for lane in range(4):  # a lane stuck (e.g. a sign bit never set) would be far off p
        assert abs(1 - lanes[:, lane].float().mean().item() - p) < 6 * sd


def test_neighbouring_elements_are_independent():
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([2_000_000]), 0.5).float()
    both = (keep[:-1] * keep[1:]).mean().item()  # P(keep, keep) = 0.25 when independent
    assert abs(both - 0.25) < 6 * math.sqrt(0.25 * 0.75 / keep.numel())


def test_survivors_are_scaled_so_the_expectation_is_kept():
    torch.manual_seed(0)
    x = torch.rand(400, 500) + 0.5
    y = Dropout(0.3).train()(x)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.7)
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.01


def test_the_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(0)
    x = torch.randn(64, 128, requires_grad=True)
    y = Dropout(0.25).train()(x)
    y.sum().backward()
    assert torch.equal(x.grad, (y.detach() != 0).float() / 0.75)


def test_bf16_input_keeps_its_dtype():
    torch.manual_seed(0)
    x = torch.ones(32, 64, dtype=torch.bfloat16)
    y = Dropout(0.5).train()(x)
    assert y.dtype == torch.bfloat16 and set(y.unique().tolist()) == {0.0, 2.0}


def test_eval_mode_p0_and_p1_behave_as_nn_dropout():
    x = torch.randn(8, 16)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert isinstance(Dropout(0.1), nn.Dropout)


def test_the_same_seed_gives_the_same_training_step():
    """Masks come from torch's default generator: a seed (and a resumed run's restored RNG state) fixes them."""
    cfg = ModelConfig.preset("tiny", vocab_size=50, dropout=0.3)
    model = EncoderDecoder(cfg).train()
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 6))
    torch.manual_seed(5)
    first = model(src, tgt)
    torch.manual_seed(5)
    assert torch.equal(model(src, tgt), first)
    assert not torch.equal(model(src, tgt), first)  # the next masks differ
