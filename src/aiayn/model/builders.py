"""Builders: the parts of a Transformer made from a ``ModelConfig`` (embeddings, attention, feed-forward,
the encoder and decoder stacks, the output projection), which ``aiayn.model.transformer`` assembles into
the family's members. Each option of the config is read here, in one place."""

from __future__ import annotations

from torch import Tensor, nn

from aiayn.model.attention import MultiHeadAttention
from aiayn.model.config import ModelConfig
from aiayn.model.embeddings import InputEmbedding, TokenEmbedding, build_positions
from aiayn.model.experts import MixtureOfExperts
from aiayn.model.layers import (
    ACTIVATIONS,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionwiseFeedForward,
    Residual,
    SwiGLUFeedForward,
    make_norm,
)
from aiayn.model.positions import RelativePositionBias, RotaryEmbedding


def build_embedding(cfg: ModelConfig, tokens: TokenEmbedding) -> InputEmbedding:
    positions = build_positions(cfg.positions, cfg.d_model, cfg.max_len, cfg.position_base,
                                cfg.sinusoid_layout == "halves")
    norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.embedding_norm else None
    return InputEmbedding(tokens, positions, cfg.dropout, norm)


def _rope(cfg: ModelConfig, base: float | None = None) -> RotaryEmbedding | None:
    """The rotary embedding of the config (``base``: another base than ``position_base``, unscaled: Gemma 3's
    sliding layers)."""
    if cfg.positions != "rope":
        return None
    scaling = cfg.rope_scaling if base is None else None
    return RotaryEmbedding(cfg.d_head, base or cfg.position_base, cfg.rope_layout == "halves", scaling, cfg.rotary_dim)


def _final_norm(cfg: ModelConfig) -> nn.Module | None:
    return make_norm(cfg.norm_type, cfg.d_model, cfg.layer_norm_eps) if cfg.norm != "post" else None


def build_attention(cfg: ModelConfig, rope: RotaryEmbedding | None = None) -> MultiHeadAttention:
    """Multi-head attention as the config says: heads, key/value heads (GQA), head size, biases, scaling, q/k
    norms."""
    dropout = cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout
    norms = [make_norm(cfg.norm_type, cfg.d_head, cfg.layer_norm_eps) for _ in range(2)] if cfg.qk_norm else [None] * 2
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, dropout, rope, n_kv_heads=cfg.n_kv_heads,
                              d_head=cfg.head_dim, qkv_bias=cfg.qkv_bias, out_bias=cfg.out_bias,
                              scaled=cfg.scale_attention, q_norm=norms[0], k_norm=norms[1],
                              query_scale=cfg.query_scale, softcap=cfg.attention_softcap)


def build_feed_forward(cfg: ModelConfig) -> nn.Module:
    """The position-wise feed-forward network: equation (2) or SwiGLU, with or without biases; a mixture of
    SwiGLU experts with ``n_experts``."""
    if cfg.n_experts:
        return MixtureOfExperts(cfg.d_model, cfg.expert_d_ff or cfg.d_ff, cfg.n_experts, cfg.experts_per_token,
                                cfg.renorm_experts, cfg.activation)
    dropout = cfg.dropout if cfg.activation_dropout is None else cfg.activation_dropout
    kind = SwiGLUFeedForward if cfg.feed_forward == "swiglu" else PositionwiseFeedForward
    return kind(cfg.d_model, cfg.d_ff, dropout, cfg.activation, cfg.ffn_bias)


def _relative(cfg: ModelConfig, bidirectional: bool) -> RelativePositionBias | None:
    """T5's bias table of a stack (shared by its layers), or None for other positions."""
    if cfg.positions != "relative":
        return None
    return RelativePositionBias(cfg.n_heads, cfg.relative_buckets, cfg.relative_max_distance, bidirectional)


def build_residual(cfg: ModelConfig) -> Residual:
    """The residual block around a sublayer: post- or pre-norm, LayerNorm or RMSNorm, the config's dropout."""
    return Residual(cfg.d_model, cfg.dropout, cfg.norm != "post", cfg.layer_norm_eps, cfg.norm_type,
                    post_norm=cfg.norm == "sandwich")


def build_encoder(cfg: ModelConfig) -> Encoder:
    rope = _rope(cfg)  # one for every layer (no parameters)
    layers = [EncoderLayer(build_attention(cfg, rope), build_feed_forward(cfg), build_residual(cfg),
                           build_residual(cfg)) for _ in range(cfg.n_encoder_layers)]
    return Encoder(layers, _final_norm(cfg), _relative(cfg, bidirectional=True))


def build_decoder(cfg: ModelConfig, cross_attention: bool = True) -> Decoder:
    """The decoder stack; with ``layer_types``, its sliding layers are ``local`` (their own rotary base when the
    config gives ``local_position_base``)."""
    rope = _rope(cfg)  # one for every layer (no parameters)
    local_rope = rope if cfg.local_position_base is None else _rope(cfg, cfg.local_position_base)
    local = [t == "sliding" for t in cfg.layer_types] or [False] * cfg.n_decoder_layers
    layers = [DecoderLayer(build_attention(cfg, local_rope if local[i] else rope), build_feed_forward(cfg),
                           build_residual(cfg), build_residual(cfg),
                           *((build_attention(cfg), build_residual(cfg)) if cross_attention else (None, None)),
                           local=local[i])
              for i in range(cfg.n_decoder_layers)]
    return Decoder(layers, _final_norm(cfg), _relative(cfg, bidirectional=False))


def build_output(cfg: ModelConfig, vocab: int, tokens: TokenEmbedding) -> nn.Linear:
    """Pre-softmax linear layer (section 3.4); its weight is the embedding's when sharing (``decoder``, ``all``); a
    bias only with ``output_bias`` (Marian)."""
    proj = nn.Linear(cfg.d_model, vocab, bias=cfg.output_bias)
    if cfg.share_embeddings in ("decoder", "all"):
        proj.weight = tokens.weight
    return proj


class OutputTransform(nn.Module):
    """BERT's masked-LM head before the output projection: LayerNorm(activation(x W + b)). (B, T, D) -> same."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.activation(self.dense(x)))
