"""Reference attention (the formula) against the fast path, gradients, masks, multi-head shapes."""

import pytest
import torch

from aiayn.model.attention import MultiHeadAttention, fast_attention, reference_attention
from aiayn.model.masks import causal_mask


def _qkv(dtype=torch.float32, b=2, h=3, t=5, s=7, d=8):
    return (torch.randn(b, h, t, d, dtype=dtype), torch.randn(b, h, s, d, dtype=dtype),
            torch.randn(b, h, s, d, dtype=dtype))


def _random_mask(b=2, t=5, s=7):
    mask = torch.rand(b, 1, t, s) > 0.4
    mask[0, 0, 1] = False  # one fully masked row
    return mask


@pytest.mark.parametrize("with_mask", [False, True])
def test_fast_equals_reference_float32(with_mask, device):
    q, k, v = _qkv()
    mask = _random_mask() if with_mask else None
    torch.testing.assert_close(fast_attention(q, k, v, mask), reference_attention(q, k, v, mask)[0],
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("with_mask", [False, True])
def test_fast_equals_reference_float64(with_mask, device):
    q, k, v = _qkv(torch.float64)
    mask = _random_mask() if with_mask else None
    torch.testing.assert_close(fast_attention(q, k, v, mask), reference_attention(q, k, v, mask)[0],
                               atol=1e-12, rtol=0)


def test_fully_masked_row_gives_zeros_not_nan_with_finite_gradients(device):
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = torch.zeros(2, 1, 5, 7, dtype=torch.bool)
    mask[1] = True
    for out in (fast_attention(q, k, v, mask), reference_attention(q, k, v, mask)[0]):
        assert (out[0] == 0).all() and torch.isfinite(out).all()
        (grad,) = torch.autograd.grad(out.sum(), q)
        assert torch.isfinite(grad).all()


def test_masked_weights_exactly_zero_and_rows_sum_to_one(device):
    q, k, v = _qkv()
    mask = _random_mask()
    _, w = reference_attention(q, k, v, mask)
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()
    live = mask.any(-1).expand(2, 3, 5)
    torch.testing.assert_close(w.sum(-1)[live], torch.ones(int(live.sum())))


def test_gradcheck_reference_attention():
    q, k, v = (t.requires_grad_() for t in _qkv(torch.float64, b=1, h=2, t=3, s=4, d=4))
    mask = torch.tensor([[True, True, False, True]])
    assert torch.autograd.gradcheck(lambda a, b, c: reference_attention(a, b, c, mask)[0], (q, k, v))


def test_causal_mask_with_offset():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def test_multihead_shapes_and_weights_only_when_asked():
    mha = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    out, w = mha(x, mem)
    assert out.shape == (2, 5, 16) and w is None
    out2, w = mha(x, mem, need_weights=True)
    assert w.shape == (2, 4, 5, 7)
    torch.testing.assert_close(out, out2, atol=1e-5, rtol=0)


def test_multihead_equals_per_head_formula(device):
    """Concat(head_i) W_O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), written head by head."""
    torch.manual_seed(1)
    mha = MultiHeadAttention(d_model=12, n_heads=3).double().eval()
    x = torch.randn(1, 4, 12, dtype=torch.float64)
    q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
    heads = []
    for i in range(3):
        sl = slice(4 * i, 4 * i + 4)
        scores = q[..., sl] @ k[..., sl].transpose(-1, -2) / 2.0
        heads.append(scores.softmax(-1) @ v[..., sl])
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(mha(x, x)[0], expected)
