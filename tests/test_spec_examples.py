"""SPEC section 5: the worked examples, to 6 decimals."""

import torch

from aiayn.model.attention import fast_attention, reference_attention
from aiayn.model.positions import sinusoidal_encoding


def test_soft_dictionary_lookup(device):
    """Keys apple/banana/chair with values 10/5/2; the query matches them with weights 0.6/0.4/0 -> 8.

    With d_k = 1 and q = 1, the scores are the keys themselves, so keys log 0.6 and log 0.4 give the softmax
    weights 0.6 and 0.4; chair is masked out (True = may attend), so its weight is exactly 0.
    """
    q = torch.ones(1, 1, dtype=torch.float64)  # (T=1, d_k=1)
    k = torch.tensor([[0.6], [0.4], [5.0]], dtype=torch.float64).log()  # apple, banana, chair: (S=3, 1)
    v = torch.tensor([[10.0], [5.0], [2.0]], dtype=torch.float64)  # (S, 1)
    mask = torch.tensor([[True, True, False]])  # (T, S)
    out, weights = reference_attention(q, k, v, mask)
    torch.testing.assert_close(weights, torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64), atol=1e-12, rtol=0)
    assert round(float(out), 6) == 8.0
    assert round(float(fast_attention(q[None], k[None], v[None], mask[None])), 6) == 8.0


def test_identity_projection_self_attention(device):
    x = torch.tensor([[1.0, 3, 2], [1, 1, 3], [1, 2, 1]], dtype=torch.float64)
    z = torch.softmax(x @ x.T, dim=-1) @ x
    expected = torch.tensor([[1, 2.957691, 2.011295], [1, 1.540148, 2.722573], [1, 2.864164, 2.000000]],
                            dtype=torch.float64)
    torch.testing.assert_close(z, expected, atol=5e-7, rtol=0)
    # Our attention with a scale that cancels 1/sqrt(d_k) reproduces it: q = x * sqrt(3).
    out, _ = reference_attention(x * 3 ** 0.5, x, x)
    torch.testing.assert_close(out, expected, atol=5e-7, rtol=0)


def test_sinusoidal_base_100(device):
    pe = sinusoidal_encoding(4, 4, base=100.0, dtype=torch.float64)
    expected = torch.tensor([[0, 1, 0, 1], [0.841471, 0.540302, 0.099833, 0.995004],
                             [0.909297, -0.416147, 0.198669, 0.980067],
                             [0.141120, -0.989992, 0.295520, 0.955336]], dtype=torch.float64)
    torch.testing.assert_close(pe, expected, atol=5e-7, rtol=0)


def test_sinusoidal_base_10000(device):
    pe = sinusoidal_encoding(3, 4, dtype=torch.float64)
    expected = torch.tensor([[0, 1, 0, 1], [0.841471, 0.540302, 0.010000, 0.999950],
                             [0.909297, -0.416147, 0.019999, 0.999800]], dtype=torch.float64)
    torch.testing.assert_close(pe, expected, atol=5e-7, rtol=0)


def test_softmax_rows_sum_to_one_and_masked_weight_is_exactly_zero():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    mask = torch.ones(2, 5, 6, dtype=torch.bool)
    mask[:, :, 2] = False
    _, w = reference_attention(q, k, v, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5))
    assert (w[:, :, 2] == 0).all()
    assert torch.isfinite(fast_attention(q, k, v, mask)).all()
