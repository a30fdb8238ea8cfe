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


def test_unscaled_attention_is_plain_dot_products_on_both_paths():
    """scale_attention False (section 3.2.1's ablation): softmax(Q K^T) V, on the fast and the reference path,
    and the weights saturate: with d_k 256 nearly every row is almost one-hot, unlike the scaled ones."""
    torch.manual_seed(1)
    plain = MultiHeadAttention(d_model=12, n_heads=3, scaled=False).double().eval()
    x = torch.randn(1, 4, 12, dtype=torch.float64)
    q, k, v = plain.q_proj(x), plain.k_proj(x), plain.v_proj(x)
    heads = [(q[..., s] @ k[..., s].transpose(-1, -2)).softmax(-1) @ v[..., s]
             for s in (slice(0, 4), slice(4, 8), slice(8, 12))]
    expected = plain.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(plain(x, x)[0], expected)
    torch.testing.assert_close(plain(x, x, need_weights=True)[0], expected)
    wide, unscaled = (MultiHeadAttention(d_model=256, n_heads=1, scaled=s).eval() for s in (True, False))
    unscaled.load_state_dict(wide.state_dict())
    h = torch.randn(1, 50, 256) * 4
    peak = [m(h, h, need_weights=True)[1].amax(-1) for m in (wide, unscaled)]  # (1, 1, T) largest weight per row
    assert (peak[1] > 0.99).float().mean() > 0.5 > (peak[0] > 0.99).float().mean()


def test_a_model_without_the_scale_builds_and_exports_refuse_it():
    from aiayn.interop.ctranslate2 import ctranslate2_problems
    from aiayn.model.config import ModelConfig
    from aiayn.model.transformer import EncoderDecoder

    model = EncoderDecoder(ModelConfig.preset("tiny", vocab_size=50, scale_attention=False))
    assert all(m.unscale == 4.0 for m in model.modules() if isinstance(m, MultiHeadAttention))  # sqrt(16)
    assert "scale_attention false (unscaled dot products)" in ctranslate2_problems(model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["cpu-flash-kernel", "written-out"])
def test_attention_merged_from_parts_equals_attention_over_the_joined_keys(dtype):
    """merged_attention (a shared prefix read where it lies): keys and values in three parts, grouped-query heads,
    the causal mask cut with them, equal to one attention over the keys joined."""
    from aiayn.model.attention import fast_attention, merged_attention
    from aiayn.model.masks import causal_mask

    torch.manual_seed(0)
    q = torch.randn(1, 6, 5, 16, dtype=dtype)
    k, v = torch.randn(1, 2, 23, 16, dtype=dtype), torch.randn(1, 2, 23, 16, dtype=dtype)
    mask = causal_mask(5, 23)[None, None]  # (1, 1, 5, 23): the 5 newest positions
    cuts = [(0, 9), (9, 18), (18, 23)]
    merged = merged_attention(q, [(k[:, :, a:b], v[:, :, a:b], mask[..., a:b]) for a, b in cuts])
    whole = fast_attention(q, k, v, mask)
    assert torch.allclose(merged, whole, atol=1e-5 if dtype == torch.float32 else 1e-12)
    unmasked = merged_attention(q, [(k[:, :, a:b], v[:, :, a:b], None) for a, b in cuts])
    assert torch.allclose(unmasked, fast_attention(q, k, v), atol=1e-5 if dtype == torch.float32 else 1e-12)
