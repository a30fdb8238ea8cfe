"""The three models: causality, padding, permutation equivariance, sizes, save/load, caching, errors."""

import pytest
import torch

from aiayn import DecoderOnly, EncoderDecoder, EncoderOnly, ModelConfig, build_model, count_parameters
from aiayn.model.build import load_model

from conftest import random_ids, tiny

POSITIONS = ["sinusoidal", "learned", "rope", "relative"]


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(positions, norm, device):
    model = EncoderDecoder(tiny(positions=positions, norm=norm)).eval()
    src, tgt = random_ids(2, 6), random_ids(2, 8)
    changed = tgt.clone()
    changed[:, 5:] = random_ids(2, 3)
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_decoder_only_is_causal(device):
    model = DecoderOnly(tiny(arch="decoder-only")).eval()
    ids = random_ids(2, 9)
    changed = ids.clone()
    changed[:, 4:] = random_ids(2, 5)
    torch.testing.assert_close(model(ids)[:, :4], model(changed)[:, :4], atol=1e-6, rtol=0)


@pytest.mark.parametrize("positions", POSITIONS)
def test_outputs_do_not_depend_on_padding(positions, device):
    cfg = tiny(positions=positions)
    model = EncoderDecoder(cfg).eval()
    src, tgt = random_ids(1, 5), random_ids(1, 4)
    alone = model(src, tgt)
    padded_src = torch.cat([src, torch.full((1, 6), cfg.pad_id)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((1, 3), cfg.pad_id)], dim=1)
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, :4], alone, atol=1e-5, rtol=0)
    # ... and batched with longer sentences
    other_src, other_tgt = random_ids(2, 11), random_ids(2, 7)
    batch_src = torch.cat([padded_src, other_src], dim=0)
    batch_tgt = torch.cat([padded_tgt, other_tgt], dim=0)
    torch.testing.assert_close(model(batch_src, batch_tgt)[:1, :4], alone, atol=1e-5, rtol=0)


def test_masked_attention_weights_are_zero_and_rows_sum_to_one():
    cfg = tiny()
    model = EncoderDecoder(cfg).eval()
    src = torch.cat([random_ids(1, 4), torch.zeros(1, 3, dtype=torch.long)], dim=1)  # 3 pads
    maps = model.attention_maps(src, random_ids(1, 5))
    for w in maps["encoder"] + maps["cross"]:
        assert (w[..., 4:] == 0).all()
    for w in maps["decoder_self"]:
        assert (w.triu(diagonal=1) == 0).all()
    for w in maps["encoder"] + maps["cross"] + maps["decoder_self"]:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_encoder_permutation_equivariant_only_without_positions():
    perm = torch.tensor([3, 0, 4, 1, 2])
    ids = random_ids(2, 5)
    for positions, equivariant in (("none", True), ("sinusoidal", False), ("rope", False)):
        model = EncoderOnly(tiny(arch="encoder-only", positions=positions)).eval()
        same = torch.allclose(model(ids)[:, perm], model(ids[:, perm]), atol=1e-5)
        assert same == equivariant, positions


def test_base_parameter_count_matches_analytical():
    cfg = ModelConfig.preset("base", vocab_size=37000, share_embeddings="all")
    model = build_model(cfg)
    real = sum(p.numel() for p in model.parameters())
    assert real == count_parameters(cfg) == 63_082_496


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only", "encoder-only"])
@pytest.mark.parametrize("share", ["none", "decoder", "inputs", "all"])
@pytest.mark.parametrize("positions", ["learned", "rope", "relative"])
@pytest.mark.parametrize("norm", ["post", "pre", "sandwich-qk"])
def test_parameter_count_every_variant(arch, share, positions, norm):
    extra = {"norm": "sandwich", "qk_norm": True} if norm == "sandwich-qk" else {"norm": norm}
    cfg = tiny(arch=arch, share_embeddings=share, positions=positions, **extra,
               tgt_vocab_size=None if share in ("all", "inputs") else 33)
    model = build_model(cfg)
    assert isinstance(model, {"encoder-decoder": EncoderDecoder, "decoder-only": DecoderOnly,
                              "encoder-only": EncoderOnly}[arch])
    assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)


def test_weight_tying_three_ways():
    none = EncoderDecoder(tiny(share_embeddings="none", tgt_vocab_size=33))
    assert none.output.weight is not none.tgt_embed.tokens.weight
    dec = EncoderDecoder(tiny(share_embeddings="decoder", tgt_vocab_size=33))
    assert dec.output.weight is dec.tgt_embed.tokens.weight
    assert dec.src_embed.tokens is not dec.tgt_embed.tokens
    both = EncoderDecoder(tiny(share_embeddings="all"))
    assert both.src_embed.tokens is both.tgt_embed.tokens and both.output.weight is both.src_embed.tokens.weight
    inputs = EncoderDecoder(tiny(share_embeddings="inputs"))  # T5 v1.1: one embedding, an output of its own
    assert inputs.src_embed.tokens is inputs.tgt_embed.tokens
    assert inputs.output.weight is not inputs.src_embed.tokens.weight


def test_rescale_output_scales_the_decoder_output_by_one_over_sqrt_d_model():
    model = EncoderDecoder(tiny(norm="pre")).eval()
    rescaled = EncoderDecoder(tiny(norm="pre", rescale_output=True)).eval()
    rescaled.load_state_dict(model.state_dict())
    src, tgt = random_ids(2, 5), random_ids(2, 4)
    with torch.no_grad():  # the output has no bias: the logits themselves scale
        torch.testing.assert_close(rescaled(src, tgt), model(src, tgt) * 64 ** -0.5, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only", "encoder-only"])
def test_save_load_round_trip(tmp_path, arch):
    cfg = tiny(arch=arch, positions="learned", share_embeddings="decoder", tgt_vocab_size=None)
    model = build_model(cfg).eval()
    model.save(tmp_path / "ckpt")
    names = ["checksums.json", "config.json", "model.safetensors"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == names
    loaded = load_model(tmp_path / "ckpt")
    assert type(loaded) is type(model) and loaded.config == cfg
    ids = random_ids(2, 6)
    args = (ids, random_ids(2, 4)) if arch == "encoder-decoder" else (ids,)
    assert torch.equal(model(*args), loaded(*args))
    assert not list(tmp_path.glob(".*tmp"))


def test_load_with_mismatched_weights_is_a_clear_error(tmp_path):
    EncoderDecoder(tiny()).save(tmp_path / "a")
    tiny(d_model=32).save(tmp_path / "a" / "config.json")
    with pytest.raises(ValueError, match=r"config\.json: checksum mismatch"):
        load_model(tmp_path / "a", EncoderDecoder)
    (tmp_path / "a" / "checksums.json").unlink()  # without checksums, the weights do not fit the config
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        load_model(tmp_path / "a", EncoderDecoder)


def test_token_ids_out_of_range_raise_before_computing():
    model = EncoderDecoder(tiny())
    with pytest.raises(ValueError, match=r"\[0, 40\)"):
        model(torch.tensor([[5, 40]]), torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match=r"\[0, 40\)"):
        model(torch.tensor([[5, -1]]), torch.tensor([[1, 5]]))


def test_sequence_longer_than_learned_table_raises():
    model = EncoderDecoder(tiny(positions="learned", max_len=8))
    with pytest.raises(ValueError, match="max_len=8"):
        model(random_ids(1, 9), random_ids(1, 3))


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_step_logits_equal_full_pass(arch, positions, device):
    model = build_model(tiny(arch=arch, positions=positions, norm="pre")).eval()
    src, tgt = random_ids(2, 7), random_ids(2, 6)
    with torch.no_grad():
        if arch == "encoder-decoder":
            memory = model.encode(src)
            src_mask = src != 0
            full = model.decode(tgt, memory, src_mask)
            cache = model.new_cache(2, 6, memory)
            steps = [model.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache) for t in range(6)]
        else:
            full = model.decode(tgt)
            cache = model.new_cache(2, 6, tgt.float())
            steps = [model.decode(tgt[:, :3], cache=cache)]
            steps += [model.decode(tgt[:, t:t + 1], cache=cache) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_wrong_class_for_arch_is_a_clear_error():
    with pytest.raises(ValueError, match="arch"):
        EncoderDecoder(tiny(arch="decoder-only"))
    with pytest.raises(ValueError, match="arch"):
        DecoderOnly(tiny(arch="encoder-only"))


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_every_member_takes_any_preset(preset):
    """docs/architecture.md: DecoderOnly(config)(ids) and EncoderOnly(config)(ids) with a preset's config."""
    config = ModelConfig.preset(preset, vocab_size=100)
    ids = random_ids(2, 5, vocab=100)
    for cls in (DecoderOnly, EncoderOnly):
        model = cls(config).eval()
        assert model.config.arch == cls.arch and model.config.d_model == config.d_model
        assert model(ids).shape == (2, 5, 100)


def test_token_embeddings_are_scaled_by_sqrt_d_model():
    """Section 3.4: the embedding weights are multiplied by sqrt(d_model) (and not without ``scale_embeddings``)."""
    from aiayn.model.embeddings import TokenEmbedding

    ids = torch.tensor([[5, 9, 0]])
    scaled, plain = TokenEmbedding(40, 64, True, 0), TokenEmbedding(40, 64, False, 0)
    plain.load_state_dict(scaled.state_dict())
    weight = next(scaled.parameters())
    assert torch.allclose(scaled(ids), weight[ids] * 8.0) and torch.allclose(plain(ids), weight[ids])


def test_both_decoders_share_one_decode_signature_and_one_mask_helper():
    """After the source's two arguments, EncoderDecoder.decode takes what DecoderOnly.decode takes, in order; and
    both build their masks and positions with masks.decoder_inputs."""
    import inspect

    from aiayn.model import decoder_only, transformer

    seq2seq = list(inspect.signature(transformer.EncoderDecoder.decode).parameters)
    lm = list(inspect.signature(decoder_only.DecoderOnly.decode).parameters)
    assert seq2seq[:4] == ["self", "tgt_ids", "memory", "src_mask"] and seq2seq[4:] == lm[2:]
    source = inspect.getsource(transformer) + inspect.getsource(decoder_only)
    assert source.count("decoder_inputs(") == 3 and "torch.arange" not in source  # the decoders and attention_maps


STEP_TOGETHER = {
    "rope-gqa": dict(positions="rope", n_kv_heads=2),
    "sliding-qk-norm": dict(positions="rope", norm="sandwich", qk_norm=True, n_decoder_layers=3,
                            layer_types=["sliding", "full", "sliding"], sliding_window=4),
    "experts": dict(positions="rope", feed_forward="swiglu", activation="silu", n_experts=4, experts_per_token=2,
                    expert_d_ff=24),
    "learned-unfused": dict(positions="learned"),
}


@pytest.mark.parametrize("name", STEP_TOGETHER)
def test_batches_stepped_together_equal_each_stepped_alone(name):
    """DecoderOnly.step_together (a long prompt's chunk inside the running rows' pass): running rows padded in front
    by a step's one column each and a 9-column chunk of another prompt, in one pass, give each batch the logits and
    the cache it gets alone."""
    from aiayn.inference.precision import fuse

    torch.manual_seed(3)
    model = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, **STEP_TOGETHER[name])).double().eval()
    if name != "learned-unfused":
        model = fuse(model)  # Q, K and V in one projection, as an inference copy has them
    prompts = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 0, 0, 0, 0]])  # right-padded
    long = random_ids(1, 14, vocab=30)
    runs = []
    for together in (False, True):
        running, state = model.start(prompts, 4)
        model.step(running, state, last=True)  # the prompts in the cache; a step reads one new column
        running = torch.cat([running, torch.tensor([[15], [16]])], 1)
        joining, other = model.start(long, 2)
        model.step(joining[:, :5], other, last=True)  # its first chunk, alone
        parts = [(running, state), (joining[:, :14], other)]
        with torch.no_grad():
            logits = model.step_together(parts) if together else [model.step(t, s, last=True) for t, s in parts]
        runs.append((logits, [(s.cache.layers[-1].self_kv.k[:, :, :s.position], s.position) for _, s in parts]))
    (alone, cached), (both, cached_both) = runs
    for a, b in zip(alone, both, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-9)
    for (a, n), (b, m) in zip(cached, cached_both, strict=True):
        assert n == m and torch.allclose(torch.nan_to_num(a), torch.nan_to_num(b), atol=1e-9)
