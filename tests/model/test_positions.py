"""Positions: sinusoidal properties, learned-table limits, rotary embedding."""

import math

import pytest
import torch

from aiayn.model.positions import (
    LearnedPositions,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositions,
    position_ids,
    relative_buckets,
    sinusoidal_encoding,
)


def test_sinusoidal_any_length_and_offset_consistent():
    long = sinusoidal_encoding(5000, 32)
    assert long.shape == (5000, 32) and torch.isfinite(long).all()
    torch.testing.assert_close(sinusoidal_encoding(10, 32, offset=7), long[7:17])


def test_sinusoidal_relative_position_is_a_linear_map():
    """Section 3.5: PE(pos + k) is a linear function (a rotation per pair) of PE(pos)."""
    d, k = 8, 3
    pe = sinusoidal_encoding(20, d, dtype=torch.float64)
    for i in range(d // 2):
        w = k / 10000 ** (2 * i / d)
        rot = torch.tensor([[math.cos(w), -math.sin(w)], [math.sin(w), math.cos(w)]], dtype=torch.float64)
        pair = pe[:, 2 * i: 2 * i + 2]  # (L, 2): (sin, cos)
        torch.testing.assert_close(pair[:-k] @ rot, pair[k:])


def test_learned_positions_refuse_too_long():
    table = LearnedPositions(8, 4)
    assert table(8).shape == (8, 4)
    with pytest.raises(ValueError, match="max_len=8"):
        table(9)
    with pytest.raises(ValueError, match="max_len=8"):
        table(2, offset=7)


def test_rope_rotates_pairs_and_depends_only_on_relative_position():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    # the score between positions m and n depends on m - n only
    s1 = (rope(q, 5) * rope(k, 2)).sum()
    s2 = (rope(q, 13) * rope(k, 10)).sum()
    torch.testing.assert_close(s1, s2, atol=1e-5, rtol=0)
    # norms are preserved, position 0 is the identity
    torch.testing.assert_close(rope(q, 9).norm(), q.norm())
    torch.testing.assert_close(rope(q, 0), q)
    # the first pair rotates by m * theta_0 = m radians
    x = torch.zeros(1, 1, 1, 8)
    x[..., 0] = 1.0
    out = rope(x, 2)
    torch.testing.assert_close(out[..., :2].flatten(), torch.tensor([math.cos(2), math.sin(2)]))


def test_marian_halves_layout_puts_every_sin_before_every_cos():
    """Marian's layout: dimension i < D/2 is sin(pos / 10000^(2i/D)), dimension D/2 + i its cos."""
    d, n = 10, 7
    pe = SinusoidalPositions(d, halves=True)(n)
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (n, D/2)
    expected = torch.cat([angle.sin(), angle.cos()], dim=1).float()
    assert torch.allclose(pe, expected, atol=1e-6)
    assert torch.equal(pe[:, : d // 2], SinusoidalPositions(d)(n)[:, 0::2])  # the same values, moved
    offset = torch.tensor([0, 3])
    assert torch.allclose(SinusoidalPositions(d, halves=True)(2, offset)[1], pe[3:5])  # per-row offsets too


def test_rope_tables_equal_the_angles_computed_directly():
    """cos/sin read from the kept table equal cos(m theta), sin(m theta) computed for the block, also past the
    table's first size (it grows) and for per-row offsets (left-padded rows, negative positions clamped to 0)."""
    rope = RotaryEmbedding(16, base=500.0, halves=True)
    x = torch.randn(2, 3, 4, 16)
    for offset in (0, 7, 300, 1000, torch.tensor([-2, 5]), torch.tensor([1000, 0])):
        cos, sin = rope.cos_sin(4, offset, x)
        pos = position_ids(4, offset).float()  # (T,) or (B, T)
        angle = pos[..., None] * rope.inv_freq  # (T, D/2) or (B, T, D/2)
        if angle.dim() == 3:
            angle = angle[:, None]  # (B, 1, T, D/2)
        torch.testing.assert_close(cos, angle.cos(), rtol=0, atol=0)
        torch.testing.assert_close(sin, angle.sin(), rtol=0, atol=0)
    assert rope.tables[(x.device, x.dtype)][0].size(0) >= 1004


def test_relative_buckets_written_out():
    """T5's buckets for 8 buckets up to distance 20: bidirectional, 4 a direction, 0 and 1 exact, then logarithmic;
    causal, 8 for keys at or before the query, 0-3 exact; later keys share bucket 0."""
    offsets = torch.tensor([-30, -20, -10, -5, -3, -2, -1, 0, 1, 2, 3, 5, 10, 20, 30])
    assert relative_buckets(offsets, True, 8, 20).tolist() == [3, 3, 3, 2, 2, 2, 1, 0, 5, 6, 6, 6, 7, 7, 7]
    assert relative_buckets(offsets, False, 8, 20).tolist() == [7, 7, 6, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0]


def test_the_relative_bias_depends_on_key_minus_query_only_and_new_queries_come_last():
    torch.manual_seed(0)
    bias = RelativePositionBias(n_heads=3, n_buckets=8, max_distance=20, bidirectional=False)
    full = bias(12, 12)  # (1, H, T, S)
    assert full.shape == (1, 3, 12, 12)
    for d in range(-11, 12):  # every diagonal is one value per head
        diagonal = full[0].diagonal(offset=d, dim1=1, dim2=2)  # (H, 12 - |d|)
        assert torch.equal(diagonal, diagonal[:, :1].expand_as(diagonal))
    torch.testing.assert_close(bias(3, 12), full[:, :, 9:])  # a cached decoder's three newest queries
