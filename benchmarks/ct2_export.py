"""Export an aiayn post-norm EncoderDecoder to a CTranslate2 model folder (benchmark-only helper).

CTranslate2 runs the very same weights, so the decode benchmark compares engines, not models. The
vocabulary is synthetic (``<blank> <s> </s> <unk> t4 t5 ...``, our fixed special ids); callers pass token
strings ``t{id}``. Needs the optional ``ctranslate2`` package.
"""

from __future__ import annotations

import torch
from ctranslate2.converters import Converter
from ctranslate2.specs import transformer_spec

from aiayn import EncoderDecoder
from aiayn.positions import sinusoidal_encoding

SPECIALS = ["<blank>", "<s>", "</s>", "<unk>"]


def vocabulary(size: int) -> list[str]:
    """Token strings for ids 0..size-1: the specials at our fixed ids, then ``t{id}``."""
    return SPECIALS + [f"t{i}" for i in range(len(SPECIALS), size)]


def _np(t: torch.Tensor):
    return t.detach().float().numpy()


def _linear(spec, *linears: torch.nn.Linear) -> None:
    """Fill a CTranslate2 linear from one or more torch linears stacked along the output dimension."""
    spec.weight = _np(torch.cat([lin.weight for lin in linears]))
    spec.bias = _np(torch.cat([lin.bias for lin in linears]))


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _self_attention(spec, attn, norm) -> None:
    _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)  # fused (3D, D)
    _linear(spec.linear[1], attn.out_proj)
    _norm(spec.layer_norm, norm)


def _ffn(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.linear1)
    _linear(spec.linear_1, ffn.linear2)
    _norm(spec.layer_norm, norm)


class AiaynConverter(Converter):
    """Maps our modules onto ``TransformerSpec`` (post-norm, no final norm, sinusoidal positions)."""

    def __init__(self, model: EncoderDecoder, max_len: int = 256) -> None:
        cfg = model.config
        if cfg.norm != "post" or cfg.positions != "sinusoidal":
            raise ValueError("only post-norm models with sinusoidal positions are exported")
        self.model, self.max_len = model, max_len

    def _load(self):
        m, cfg = self.model, self.model.config
        spec = transformer_spec.TransformerSpec.from_config(
            (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=False, no_final_norm=True)
        positions = _np(sinusoidal_encoding(self.max_len, cfg.d_model))  # (L, D), paper's interleaved layout
        spec.encoder.embeddings[0].weight = _np(m.src_embed.tokens.weight)
        spec.encoder.position_encodings.encodings = positions
        for layer_spec, layer in zip(spec.encoder.layer, m.encoder.layers, strict=True):
            _self_attention(layer_spec.self_attention, layer.self_attn, layer.res_attn.norm)
            _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
        spec.decoder.embeddings.weight = _np(m.tgt_embed.tokens.weight)
        spec.decoder.position_encodings.encodings = positions
        for layer_spec, layer in zip(spec.decoder.layer, m.decoder.layers, strict=True):
            _self_attention(layer_spec.self_attention, layer.self_attn, layer.res_self.norm)
            cross = layer.cross_attn
            _linear(layer_spec.attention.linear[0], cross.q_proj)
            _linear(layer_spec.attention.linear[1], cross.k_proj, cross.v_proj)  # fused (2D, D)
            _linear(layer_spec.attention.linear[2], cross.out_proj)
            _norm(layer_spec.attention.layer_norm, layer.res_cross.norm)
            _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
        spec.decoder.projection.weight = _np(m.output.weight)
        spec.register_source_vocabulary(vocabulary(cfg.vocab_size))
        spec.register_target_vocabulary(vocabulary(cfg.tgt_vocab_size or cfg.vocab_size))
        return spec
