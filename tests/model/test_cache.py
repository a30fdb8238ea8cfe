"""The KV cache and the decoding state: append, reorder, truncate, copy a prefix."""

import pytest
import torch

from aiayn.model.cache import DecoderCache, DecodeState, KVCache


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


def test_reorder_truncate_and_copy_prefix():
    cache = DecoderCache.allocate(n_layers=2, batch=3, n_heads=1, max_len=4, d_head=2)
    keys = torch.arange(3 * 2 * 2, dtype=torch.float32).view(3, 1, 2, 2)
    for layer in cache.layers:
        layer.self_kv.update(keys, -keys)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert torch.equal(cache.layers[1].self_kv.k[:, :, :2], keys[[2, 2, 0]])
    assert torch.equal(cache.layers[0].self_kv.v[:, :, :2], -keys[[2, 2, 0]])
    cache.truncate(1)
    assert cache.position == 1
    other = DecoderCache.allocate(2, 3, 1, 4, 2)
    other.copy_prefix(cache, 1)
    assert other.position == 1 and torch.equal(other.layers[0].self_kv.k[:, :, :1], keys[[2, 2, 0], :, :1])


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
