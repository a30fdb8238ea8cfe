"""The LLaMA options of the one model config, each checked against its formula: RMSNorm, SwiGLU, grouped-query
attention (against repeated heads, and its cache holding only key/value heads), rotary layouts and scaling
rules, per-projection biases, the sliding window; the cached step equals the full pass with all of them."""

import math

import pytest
import torch

from aiayn import DecoderOnly, EncoderDecoder, ModelConfig, count_parameters
from aiayn.model.attention import MultiHeadAttention, reference_attention, repeat_kv
from aiayn.model.layers import RMSNorm, SwiGLUFeedForward
from aiayn.model.masks import causal_mask
from aiayn.model.positions import RotaryEmbedding, rope_frequencies

LLAMA = dict(norm="pre", norm_type="rmsnorm", feed_forward="swiglu", activation="silu", positions="rope",
             rope_layout="halves", qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False,
             share_embeddings="none", dropout=0.0)


def lm(**changes) -> DecoderOnly:
    cfg = ModelConfig(arch="decoder-only", vocab_size=40, d_model=32, n_heads=4, n_encoder_layers=0,
                      n_decoder_layers=2, d_ff=48, **{**LLAMA, **changes})
    return DecoderOnly(cfg).eval()


def test_rmsnorm_is_the_formula_in_float32():
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 5, 8) * 10 + 3
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-5)
    assert norm.bfloat16()(x.bfloat16()).dtype == torch.bfloat16  # computed in float32, returned in bfloat16


def test_swiglu_is_the_formula():
    ffn = SwiGLUFeedForward(8, 12, 0.0)
    x = torch.randn(2, 3, 8)
    gate, up = x @ ffn.gate_proj.weight.T, x @ ffn.up_proj.weight.T
    assert torch.allclose(ffn(x), (gate * torch.sigmoid(gate) * up) @ ffn.down_proj.weight.T, atol=1e-6)
    assert ffn.gate_proj.bias is None


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_grouped_query_attention_equals_repeated_key_value_heads(kv_heads):
    attn = MultiHeadAttention(32, 4, n_kv_heads=kv_heads).eval()
    x = torch.randn(2, 6, 32)
    mask = causal_mask(6)[None, None]
    out, weights = attn(x, x, mask, need_weights=True)
    assert attn.k_proj.out_features == kv_heads * 8 and weights.shape == (2, 4, 6, 6)
    q, k, v = attn.heads(x, x)  # (B, 4, T, D), (B, kv, T, D) twice
    ref, _ = reference_attention(q, repeat_kv(k, 4 // kv_heads), repeat_kv(v, 4 // kv_heads), mask)
    assert torch.allclose(out, attn.out_proj(ref.transpose(1, 2).flatten(2)), atol=1e-6)
    fast, _ = attn(x, x, mask)  # the SDPA path with enable_gqa
    assert torch.allclose(fast, out, atol=1e-5)


def test_gqa_cache_holds_only_key_value_heads_and_saves_their_share():
    mha, gqa = lm(n_kv_heads=None), lm(n_kv_heads=1)
    like = torch.zeros(1)
    full, small = (m.new_cache(2, 10, like).layers[0].self_kv.k for m in (mha, gqa))
    assert full.shape == (2, 4, 10, 8) and small.shape == (2, 1, 10, 8)
    assert full.numel() == 4 * small.numel()


@pytest.mark.parametrize("changes", [
    dict(n_kv_heads=2), dict(n_kv_heads=1, sliding_window=3), dict(n_kv_heads=2, head_dim=12),
    dict(qkv_bias=True, rope_scaling={"type": "linear", "factor": 2.0}),
    dict(rope_layout="interleaved", rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8}),
])
def test_cached_step_equals_full_pass(changes):
    model = lm(**changes)
    ids = torch.randint(5, 40, (2, 9))
    full = model(ids)
    cache = model.new_cache(2, 9, torch.zeros(1))
    steps = [model.decode(ids[:, :4], cache=cache)] + [model.decode(ids[:, t:t + 1], cache=cache) for t in range(4, 9)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert count_parameters(model.config) == sum(p.numel() for p in model.parameters())


def test_sliding_window_hides_tokens_beyond_it():
    model = lm(sliding_window=3)
    ids = torch.randint(5, 40, (1, 8))
    changed = ids.clone()
    changed[0, 0] = 5 if ids[0, 0] != 5 else 6  # position 0: out of the window of positions >= 3 ... but
    a, b = model(ids), model(changed)
    # ... a window of 3 per layer, two layers: position t sees tokens down to t - 4; from 5 on, 0 is invisible
    assert torch.allclose(a[0, 5:], b[0, 5:], atol=1e-6) and not torch.allclose(a[0, 1:3], b[0, 1:3])
    mask = causal_mask(4, 6, window=2)  # 4 new queries at positions 2..5 over 6 keys
    assert mask.int().tolist() == [[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]]


def test_rope_halves_is_interleaved_with_the_head_permuted():
    x = torch.randn(1, 2, 5, 8)
    order = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # pair (2i, 2i+1) -> (i, i + 4)
    halves, pairs = RotaryEmbedding(8, halves=True), RotaryEmbedding(8)
    assert torch.allclose(halves(x[..., order]), pairs(x)[..., order], atol=1e-6)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)  # relative: the score depends on m - n only
    score = lambda m, n: (halves(q, m) * halves(k, n)).sum()  # noqa: E731
    assert torch.allclose(score(7, 3), score(4, 0), atol=1e-5)


def test_rope_scaling_rules():
    base = rope_frequencies(16, 10000.0)
    assert torch.allclose(base, 1 / 10000 ** (torch.arange(0, 16, 2) / 16))
    assert torch.allclose(rope_frequencies(16, 10000.0, {"type": "linear", "factor": 4.0}), base / 4)
    llama3 = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}
    scaled = rope_frequencies(16, 10000.0, llama3)
    wavelength = 2 * math.pi / base
    short, long = wavelength < 64 / 4, wavelength > 64 / 1
    assert torch.equal(scaled[short], base[short]) and torch.allclose(scaled[long], base[long] / 8)
    middle = ~short & ~long
    assert middle.any() and bool(((scaled[middle] < base[middle]) & (scaled[middle] > base[middle] / 8)).all())


def test_rope_scaling_against_transformers():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rule = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64, "rope_theta": 5000.0}
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters=rule)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    ours = rope_frequencies(16, 5000.0, {"type": "llama3", **{k: v for k, v in rule.items()
                                                              if k not in ("rope_type", "rope_theta")}})
    assert torch.allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("changes, field", [
    (dict(n_kv_heads=3), "n_kv_heads"), (dict(n_kv_heads=0), "n_kv_heads"), (dict(norm_type="batchnorm"), "norm_type"),
    (dict(feed_forward="moe"), "feed_forward"), (dict(rope_scaling={"type": "yarn", "factor": 2.0}), "rope_scaling"),
    (dict(rope_scaling={"type": "linear"}), "rope_scaling"), (dict(sliding_window=0), "sliding_window"),
    (dict(rope_layout="spiral"), "rope_layout"),
])
def test_bad_options_name_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        lm(**changes)


def test_options_work_in_every_member():
    cfg = ModelConfig.preset("tiny", **{**LLAMA, "n_kv_heads": 2, "vocab_size": 30})
    model = EncoderDecoder(cfg).eval()
    src, tgt = torch.randint(5, 30, (2, 6)), torch.randint(5, 30, (2, 4))
    assert model(src, tgt).shape == (2, 4, 30)
    assert count_parameters(cfg) == sum(p.numel() for p in model.parameters())
