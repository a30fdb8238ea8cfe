"""The parameter count of a config, computed on paper (it must equal the real count)."""

from __future__ import annotations

from aiayn.model.config import ModelConfig


def _attention(c: ModelConfig) -> int:
    """W_Q, W_O (h heads) and W_K, W_V (the key/value heads), with the biases the config has."""
    d, q, kv = c.d_model, c.n_heads * c.d_head, c.kv_heads * c.d_head
    return d * (q + 2 * kv) + q * d + c.qkv_bias * (q + 2 * kv) + c.out_bias * d + c.qk_norm * 2 * _norm(c, c.d_head)


def _norm(c: ModelConfig, size: int) -> int:
    """A norm's parameters: its gain (and LayerNorm's bias)."""
    return size if c.norm_type == "rmsnorm" else 2 * size


def _ffn(c: ModelConfig) -> int:
    """W1, W2 (and SwiGLU's gate) with their biases when the config has them."""
    d, d_ff = c.d_model, c.d_ff
    if c.n_experts:  # the router and every expert's three matrices
        return d * c.n_experts + c.n_experts * 3 * d * (c.expert_d_ff or d_ff)
    if c.feed_forward == "swiglu":
        return 3 * d * d_ff + c.ffn_bias * (2 * d_ff + d)
    return 2 * d * d_ff + c.ffn_bias * (d_ff + d)


def count_parameters(config: ModelConfig) -> int:
    """Number of distinct trainable parameters of ``build_model(config)`` (tied weights counted once)."""
    c = config
    d = c.d_model
    norm = _norm(c, d) * (2 if c.norm == "sandwich" else 1)  # a residual block's (sandwich: two)
    enc_layer = _attention(c) + _ffn(c) + 2 * norm
    dec_layer = 2 * _attention(c) + _ffn(c) + 3 * norm
    final = _norm(c, d) if c.norm != "post" else 0
    learned = c.max_len * d if c.positions == "learned" else 0
    learned += c.relative_buckets * c.n_heads if c.positions == "relative" else 0  # a bias table per stack
    head_tied = c.share_embeddings in ("decoder", "all")
    if c.arch == "encoder-decoder":
        tables = c.vocab_size * d + (0 if c.share_embeddings in ("all", "inputs") else c.target_vocab * d)
        head = 0 if head_tied else c.target_vocab * d
        stacks = c.n_encoder_layers * enc_layer + c.n_decoder_layers * dec_layer + 2 * final
        return tables + head + stacks + 2 * learned
    head = 0 if head_tied else c.vocab_size * d
    if c.arch == "decoder-only":
        dec_layer -= _attention(c) + norm  # no cross-attention
        return c.vocab_size * d + head + c.n_decoder_layers * dec_layer + final + learned
    return c.vocab_size * d + head + c.n_encoder_layers * enc_layer + final + learned
