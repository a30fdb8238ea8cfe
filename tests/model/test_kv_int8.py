"""The int8 KV cache (``model/kv_int8.py``): its rows, the kernel that reads them against the dequantized reference,
its bytes, and decoding on it: close to the float cache, and the same through every path a cache takes (rings,
rows joining a batch, the prompt cache, speculative roll-back)."""

import pytest
import torch

from aiayn import DecoderOnly, generate
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.engine import Engine
from aiayn.decoding.generation import rows_for
from aiayn.kernels import load
from aiayn.model.attention import fast_attention
from aiayn.model.kv_int8 import Int8Rows, cache_dtype, int8_attention

from conftest import random_ids, tiny

GREEDY = DecodingConfig(strategy="greedy", min_new_tokens=40, max_new_tokens=40, max_len_b=None)


def test_a_row_comes_back_within_half_a_step_and_a_zero_row_stays_zero():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 64) * torch.rand(2, 3, 5, 1) * 10
    x[0, 0, 0] = 0
    rows = Int8Rows.quantize(x)
    assert rows.data.dtype == torch.int8 and rows.scale.shape == (2, 3, 5, 2)  # a scale a group of 32
    largest = rows.data.unflatten(-1, (2, 32)).abs().amax(-1)
    assert ((largest == 127) | (rows.scale == 0)).all()  # each group's largest is +-127
    step = rows.scale.repeat_interleave(32, -1)
    assert ((rows.dequantize() - x).abs() <= step / 2 + 1e-6).all()
    assert (rows.dequantize()[0, 0, 0] == 0).all()
    again = Int8Rows.quantize(rows.dequantize())  # stored as floats (the prompt cache) and written back: the same
    assert torch.equal(again.data, rows.data)


def test_assigning_indexing_and_reordering_keep_the_scales_with_their_rows():
    big = Int8Rows.allocate((3, 2, 10, 8), "cpu", zeros=True)
    x = torch.randn(3, 2, 4, 8)
    big[:, :, 2:6] = x
    assert torch.allclose(big[:, :, 2:6].dequantize(), x, atol=x.abs().max().item() / 127)
    picked = big.index_select(0, torch.tensor([2, 0]))
    assert torch.equal(picked.dequantize(), big.dequantize()[[2, 0]])
    big[1, :, 2:4] = 0
    assert (big.dequantize()[1, :, 2:4] == 0).all() and (big.dequantize()[0, :, 2:4] != 0).any()


@pytest.mark.parametrize("b,h,h_kv,t,s,d", [(1, 9, 3, 1, 200, 64), (2, 4, 1, 3, 700, 256), (3, 8, 8, 1, 1, 24),
                                             (1, 2, 1, 2, 40, 48)])
def test_the_kernel_reads_the_int8_rows_as_the_dequantized_reference_does(b, h, h_kv, t, s, d):
    """aiayn::int8_attention against softmax(QK^T/sqrt(d))V over the dequantized rows: grouped heads, several
    queries, several chunks of keys (700 > 256), heads of one group (24, 48: no 32 divides them; 24: no vector width
    either), views into a larger cache,
    masks with a row that sees nothing (zeros, as fast_attention gives)."""
    assert load() is None, load()
    torch.manual_seed(1)
    q = torch.randn(b, h, t, d)
    k, v = (Int8Rows.quantize(torch.randn(b, h_kv, s + 5, d))[:, :, 2:s + 2] for _ in range(2))  # strided views
    mask = torch.rand(b, 1, t, s) > 0.3
    mask[0, 0, 0] = False
    for m in (None, mask, mask[:1]):
        got, want = int8_attention(q, k, v, m), fast_attention(q, k.dequantize(), v.dequantize(), m)
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert (int8_attention(q, k, v, mask)[0, :, 0] == 0).all()
    assert int8_attention(torch.randn(b, h, 17, d), k, v, None) is None  # a prompt's many queries: the reference


def test_the_cache_takes_under_three_tenths_of_float32s_bytes():
    cfg = tiny(arch="decoder-only", positions="rope", d_model=128, n_heads=2, n_decoder_layers=2)  # heads of 64
    model = DecoderOnly(cfg)
    sizes = {}
    for dtype in (None, torch.int8):
        model.runtime.kv_cache_dtype = dtype
        cache = model.new_cache(1, 50, torch.zeros(1))
        sizes[dtype] = sum(t.nbytes for la in cache.layers for t in (la.self_kv.k, la.self_kv.v))
    assert sizes[torch.int8] / sizes[None] == pytest.approx((64 + 2 * 4) / (64 * 4))  # 0.28x


def test_the_dtype_is_int8_or_the_weights():
    assert cache_dtype("int8") == torch.int8 and cache_dtype("auto") is None and cache_dtype(None) is None
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        cache_dtype("fp8")


@pytest.fixture(scope="module")
def lm():
    """Sliding layers of a window of 3 beside a full one (rings), float64 as the other cache tests."""
    torch.manual_seed(7)
    cfg = tiny(arch="decoder-only", vocab_size=30, positions="rope", n_decoder_layers=3, max_len=128,
               layer_types=["sliding", "full", "sliding"], sliding_window=3)
    model = DecoderOnly(cfg).double().eval()
    model.runtime.kv_cache_dtype = torch.int8
    yield model
    model.runtime.kv_cache_dtype = None


def test_each_step_scores_close_to_the_float_cache(lm):
    """A step's logits on the int8 cache against the float one's, 40 steps on: close (the cache's rounding only)."""
    torch.manual_seed(3)
    tokens = random_ids(2, 50, vocab=30)
    scores = {}
    for dtype in (torch.int8, None):
        lm.runtime.kv_cache_dtype = dtype
        start, state = lm.start(tokens[:, :10], 40)
        steps = [lm.step(start, state, last=True)[:, -1]]
        for j in range(10, 50):
            steps.append(lm.step(tokens[:, :j + 1], state, last=True)[:, -1])
        scores[dtype] = torch.stack(steps)
    lm.runtime.kv_cache_dtype = torch.int8
    assert isinstance(state.cache.layers[1].self_kv.k, torch.Tensor)  # the float run's cache
    gap = (scores[torch.int8] - scores[None]).abs().max() / scores[None].abs().max()
    assert 0 < gap < 0.02, gap


def test_rows_joining_a_batch_the_prompt_cache_and_speculative_roll_back_decode_as_alone(lm):
    """On the int8 cache, past the rings: rows joining a running batch, a prompt served from the prompt cache (its
    blocks kept as floats, written back as the same int8 rows) and speculative decoding by another model (most
    guesses rolled back) each give the tokens the prompt gets alone."""
    from aiayn.decoding import PromptCache

    torch.manual_seed(1)
    prompts = [random_ids(1, n, vocab=30) for n in (4, 25, 9)]
    alone = [generate(lm, p, config=GREEDY) for p in prompts]
    assert isinstance(lm.new_cache(1, 8, torch.zeros(1, dtype=torch.float64)).layers[0].self_kv.k, Int8Rows)
    engine, groups = Engine(lm, capacity=120), []
    for prompt in prompts:
        group, rows, beams = rows_for(lm, prompt, GREEDY)
        engine.admit(group, rows, beams)
        groups.append(group)
        for _ in range(11):
            engine.step()
            engine.remove_done()
    engine.run()
    assert [g.results() for g in groups] == alone
    store = PromptCache(lm, block_size=4)
    store.add(prompts[1][0, :20].tolist())
    assert generate(lm, prompts[1], config=GREEDY, prompt_cache=store) == alone[1] and store.hits == 1
    torch.manual_seed(2)
    draft = DecoderOnly(lm.config).double().eval()
    assert generate(lm, prompts[0], config=GREEDY, draft_model=draft) == alone[0]
