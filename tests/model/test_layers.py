"""Layers and stacks: parity with torch.nn.Transformer (copied weights), gradcheck, residual branches."""

import pytest
import torch
from torch import nn

from aiayn.model.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, PositionwiseFeedForward, Residual
from aiayn.model.masks import causal_mask, key_mask

from conftest import tiny

D, H, FF = 16, 4, 32


def _copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    wq, wk, wv = theirs.in_proj_weight.chunk(3)
    bq, bk, bv = theirs.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv)):
        proj.weight.data.copy_(w)
        proj.bias.data.copy_(b)
    ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


def _copy_common(ours, theirs) -> None:
    ours.ffn.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.linear2.load_state_dict(theirs.linear2.state_dict())
    _copy_attention(ours.self_attn, theirs.self_attn)


def _randomise_norms(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.2)
            nn.init.normal_(m.bias, 0.0, 0.2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch(norm_first):
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first),
        num_layers=2, norm=nn.LayerNorm(D) if norm_first else None, enable_nested_tensor=False)
    _randomise_norms(theirs)
    ours = Encoder([EncoderLayer.paper(D, H, FF, 0.0, norm_first=norm_first) for _ in range(2)],
                   nn.LayerNorm(D) if norm_first else None)
    for mine, ref in zip(ours.layers, theirs.layers, strict=True):
        _copy_common(mine, ref)
        mine.res_attn.norm.load_state_dict(ref.norm1.state_dict())
        mine.res_ffn.norm.load_state_dict(ref.norm2.state_dict())
    if norm_first:
        ours.norm.load_state_dict(theirs.norm.state_dict())
    x = torch.randn(3, 6, D)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] * 2 + [True] * 4])  # True = pad (torch)
    expected = theirs.eval()(x, src_key_padding_mask=pad)
    got, _ = ours.eval()(x, key_mask(~pad))
    real = ~pad
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_torch(norm_first):
    theirs = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first),
        num_layers=2, norm=nn.LayerNorm(D) if norm_first else None)
    _randomise_norms(theirs)
    ours = Decoder([DecoderLayer.paper(D, H, FF, 0.0, norm_first=norm_first) for _ in range(2)],
                   nn.LayerNorm(D) if norm_first else None)
    for mine, ref in zip(ours.layers, theirs.layers, strict=True):
        _copy_common(mine, ref)
        _copy_attention(mine.cross_attn, ref.multihead_attn)
        mine.res_self.norm.load_state_dict(ref.norm1.state_dict())
        mine.res_cross.norm.load_state_dict(ref.norm2.state_dict())
        mine.res_ffn.norm.load_state_dict(ref.norm3.state_dict())
    if norm_first:
        ours.norm.load_state_dict(theirs.norm.state_dict())
    x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    mem_pad = torch.tensor([[False] * 7, [False] * 3 + [True] * 4])
    expected = theirs.eval()(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
                             memory_key_padding_mask=mem_pad)
    got, _ = ours.eval()(x, memory, causal_mask(5)[None, None], key_mask(~mem_pad))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_gradcheck_encoder_layer_float64():
    layer = EncoderLayer.paper(8, 2, 16, 0.0).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    mask = key_mask(torch.tensor([[True, True, False]]))
    assert torch.autograd.gradcheck(lambda t: layer(t, mask)[0], (x,))


def test_residual_post_and_pre_norm_branches():
    res_post, res_pre = Residual(4, 0.0, norm_first=False), Residual(4, 0.0, norm_first=True)
    x = torch.randn(2, 3, 4)
    double = lambda t: 2 * t  # noqa: E731
    torch.testing.assert_close(res_post(x, double), nn.functional.layer_norm(3 * x, (4,)))
    torch.testing.assert_close(res_pre(x, double), x + 2 * nn.functional.layer_norm(x, (4,)))


def test_ffn_is_d_model_to_d_ff_to_d_model():
    ffn = PositionwiseFeedForward(8, 32, 0.0)
    assert ffn.linear1.weight.shape == (32, 8) and ffn.linear2.weight.shape == (8, 32)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))))


def test_attention_and_activation_dropout_default_to_dropout_and_can_differ():
    from aiayn import EncoderDecoder

    same = EncoderDecoder(tiny(dropout=0.3))
    layer = same.decoder.layers[0]
    assert layer.self_attn.dropout == layer.cross_attn.dropout == layer.ffn.dropout.p == 0.3
    apart = EncoderDecoder(tiny(dropout=0.3, attention_dropout=0.1, activation_dropout=0.0))
    for layer in (*apart.encoder.layers, *apart.decoder.layers):
        assert layer.self_attn.dropout == 0.1 and layer.ffn.dropout.p == 0.0 and layer.res_ffn.dropout.p == 0.3
    assert apart.decoder.layers[0].cross_attn.dropout == 0.1
    with pytest.raises(ValueError, match="attention_dropout"):
        tiny(attention_dropout=1.5)


def test_a_layer_is_built_from_the_parts_it_is_given():
    """torchtune's way: the builder hands a layer its attention, feed-forward and residual blocks; the layer runs
    exactly those (a SwiGLU and RMSNorm pre-norm layer equals its parts applied by hand)."""
    from aiayn.model.attention import MultiHeadAttention
    from aiayn.model.layers import DecoderLayer, SwiGLUFeedForward

    torch.manual_seed(0)
    attn, ffn = MultiHeadAttention(8, 2, 0.0), SwiGLUFeedForward(8, 16, 0.0, "silu")
    res_attn, res_ffn = Residual(8, 0.0, True, norm_type="rmsnorm"), Residual(8, 0.0, True, norm_type="rmsnorm")
    layer = EncoderLayer(attn, ffn, res_attn, res_ffn).eval()
    assert (layer.self_attn, layer.ffn, layer.res_attn, layer.res_ffn) == (attn, ffn, res_attn, res_ffn)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        h = x + attn(res_attn.norm(x), res_attn.norm(x))[0]
        assert torch.allclose(layer(x)[0], h + ffn(res_ffn.norm(h)), atol=1e-6)
    with pytest.raises(ValueError, match="cross_attn and res_cross"):
        DecoderLayer(attn, ffn, res_attn, res_ffn, cross_attn=MultiHeadAttention(8, 2, 0.0))
    assert DecoderLayer.paper(8, 2, 16, cross_attention=False).cross_attn is None
