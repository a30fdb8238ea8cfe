"""The KV cache and the decoding state: append, reorder, truncate; a sliding layer's ring."""

import pytest
import torch

from aiayn.model.cache import DecoderCache
from aiayn.model.kv_cache import ROLLBACK, KVCache
from aiayn.model.masks import causal_mask
from aiayn.model.state import DecodeState


def test_kv_cache_appends_and_refuses_overflow():
    cache = KVCache(batch=2, n_heads=3, max_len=5, d_head=4)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    k, v = cache.update(k1, v1)
    assert k.shape == (2, 3, 2, 4) and torch.equal(k, k1) and torch.equal(v, v1) and cache.length == 2
    k2 = torch.randn(2, 3, 3, 4)
    k, _ = cache.update(k2, k2)
    assert torch.equal(k, torch.cat([k1, k2], dim=2)) and cache.length == 5
    with pytest.raises(ValueError, match="KV cache full"):
        cache.update(k2[:, :, :1], k2[:, :, :1])


def test_reorder_and_truncate():
    cache = DecoderCache.allocate(n_layers=2, batch=3, n_heads=1, max_len=4, d_head=2)
    keys = torch.arange(3 * 2 * 2, dtype=torch.float32).view(3, 1, 2, 2)
    for layer in cache.layers:
        layer.self_kv.update(keys, -keys)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert torch.equal(cache.layers[1].self_kv.k[:, :, :2], keys[[2, 2, 0]])
    assert torch.equal(cache.layers[0].self_kv.v[:, :, :2], -keys[[2, 2, 0]])
    cache.truncate(1)
    assert cache.position == 1


def test_decode_state_reorders_memory_only_across_groups():
    memory, src_mask = torch.randn(4, 3, 2), torch.tensor([[True] * 3] * 4)
    state = DecodeState(DecoderCache.allocate(1, 4, 1, 3, 2), memory, src_mask, torch.tensor([0, 1, 2, 3]))
    state.reorder(torch.tensor([1, 0, 3, 2]), within_groups=True)
    assert torch.equal(state.memory, memory) and state.left_pad.tolist() == [0, 1, 2, 3]
    state.reorder(torch.tensor([3, 3, 0, 1]))
    assert torch.equal(state.memory, memory[[3, 3, 0, 1]]) and state.left_pad.tolist() == [3, 3, 0, 1]
    assert state.position == 0 and DecodeState(None).position == 0


def test_assembled_rows_get_zeros_in_front_never_old_memory_and_drop_front_columns():
    """A longer prompt joining a batch shifts its rows right by more than they hold: the new padding columns
    are masked keys, but a masked key still multiplies its value by 0, and 0 * NaN is NaN."""
    cache = DecoderCache.allocate(1, 2, 2, 16, 4)
    cache.layers[0].self_kv.update(torch.arange(2.0)[:, None, None, None].expand(2, 2, 3, 4), torch.ones(2, 2, 3, 4))
    old = cache.layers[0].self_kv
    old.k[:, :, 3:], old.v[:, :, 3:] = float("nan"), float("nan")  # what unwritten memory may hold
    other = DecoderCache.allocate(1, 1, 2, 16, 4)
    other.layers[0].self_kv.update(torch.full((1, 2, 11, 4), 7.0), torch.full((1, 2, 11, 4), 7.0))
    joined = DecoderCache.assemble([(cache, torch.tensor([1, 0]), 8), (other, None, 0)], capacity=12)
    kv = joined.layers[0].self_kv
    assert kv.length == 11 and kv.k.shape == (3, 2, 12, 4)  # 3 filled positions moved to 8..10; 0..7 padding
    assert (kv.k[:2, :, :8] == 0).all() and (kv.v[:2, :, :8] == 0).all()
    assert (kv.k[0, :, 8:11] == 1).all() and (kv.k[1, :, 8:11] == 0).all() and (kv.k[2, :, :11] == 7).all()
    kept = DecoderCache.assemble([(joined, torch.tensor([2, 0]), -8)], capacity=5).layers[0].self_kv
    assert kept.length == 3 and (kept.k[0, :, :3] == 7).all() and (kept.k[1, :, :3] == 1).all()
    with pytest.raises(ValueError, match="cannot share"):
        DecoderCache.assemble([(cache, None, 0), (other, None, 0)], capacity=20)  # ends at 3 and 11


def _windowed_attention(q, k, v, window):
    """Reference: softmax attention of every query (B, H, T, D) over all keys within the window."""
    t = q.size(2)
    mask = causal_mask(t, t, q.device, window)
    scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("chunks", [[1] * 45, [7, 1, 1, 20, 1, 3, 1, 1, 10], [45]])
def test_a_sliding_layers_ring_holds_its_window_and_attends_as_the_whole_cache(chunks):
    """Positions pass the ring's size many times over, in steps of one and in chunks: each query attends over
    what the ring returns (its mask cut by ``visible``) exactly as over every key with the window's mask."""
    torch.manual_seed(0)
    window, total = 5, sum(chunks)
    q, k, v = (torch.randn(2, 3, total, 4) for _ in range(3))
    want = _windowed_attention(q, k, v, window)
    ring = KVCache(2, 3, max_len=total, d_head=4, window=window)
    assert ring.capacity == window + ROLLBACK < total
    start = 0
    for t in chunks:
        keys, values = ring.update(k[:, :, start:start + t], v[:, :, start:start + t])
        mask = ring.visible(causal_mask(t, start + t, "cpu", window)[None, None])
        assert keys.size(2) <= max(ring.capacity, window - 1 + t)  # bounded by the window, not the length
        got = torch.nn.functional.scaled_dot_product_attention(q[:, :, start:start + t], keys, values, mask, scale=1.0)
        assert torch.allclose(got, want[:, :, start:start + t], atol=1e-5)
        start += t
    assert ring.length == total and ring.first == total - ring.capacity


def test_a_ring_rolls_back_within_its_spare_room_and_refuses_more():
    ring = KVCache(1, 1, max_len=100, d_head=2, window=4)
    ring.update(torch.randn(1, 1, 50, 2), torch.randn(1, 1, 50, 2))
    ring.truncate(50 - ROLLBACK + 3)  # the next query's window is still held
    assert ring.length == 50 - ROLLBACK + 3
    with pytest.raises(ValueError, match="cannot roll back"):
        ring.truncate(30)


def test_rings_assemble_rows_of_different_lengths_and_keep_their_latest_positions():
    torch.manual_seed(1)
    a, b = KVCache(1, 1, 60, 2, window=3), KVCache(2, 1, 60, 2, window=3)
    ka, kb = torch.randn(1, 1, 40, 2), torch.randn(2, 1, 25, 2)
    a.update(ka, ka)
    b.update(kb, kb)
    joined = KVCache.assemble([(a, None, 0), (b, torch.tensor([1]), 15)], capacity=70)
    assert joined.capacity == 3 + ROLLBACK and joined.length == 40
    held = joined.read(joined.first, 40)[0]  # (2, 1, capacity, 2), positions in order
    assert torch.equal(held[0], ka[0, :, -joined.capacity:]) and torch.equal(held[1], kb[1, :, -joined.capacity:])


def test_rows_run_together_while_their_padding_is_within_slack():
    from aiayn.model.kv_cache import SLACK, runs_of

    assert runs_of([0, 3, SLACK]) is None  # one run from column 0: nothing to skip
    assert runs_of([5, 5]) == [(0, 2, 5)]
    assert runs_of([300, 310, 0, 0, SLACK + 1]) == [(0, 2, 300), (2, 4, 0), (4, 5, SLACK + 1)]
    assert runs_of([0, SLACK, SLACK + 1]) == [(0, 2, 0), (2, 3, SLACK + 1)]  # a run's starts span at most SLACK


def test_an_assembly_for_rows_attended_apart_zeroes_the_slack_before_each_row():
    from aiayn.model.kv_cache import SLACK

    cache = DecoderCache.allocate(1, 1, 1, 8, 2)
    cache.layers[0].self_kv.update(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    long = DecoderCache.allocate(1, 1, 1, 200, 2)
    long.layers[0].self_kv.update(torch.full((1, 1, 150, 2), 2.0), torch.full((1, 1, 150, 2), 2.0))
    joined = DecoderCache.assemble([(cache, None, 147), (long, None, 0)], 160, starts=[147, 0])
    kv = joined.layers[0].self_kv
    assert (kv.k[0, :, 147 - SLACK:147] == 0).all() and (kv.v[0, :, 147 - SLACK:147] == 0).all()
    assert (kv.k[0, :, 147:150] == 1).all() and (kv.k[1, :, :150] == 2).all()
