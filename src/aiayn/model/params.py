"""The parameter count of a config, computed on paper (it must equal the real count)."""

from __future__ import annotations

from aiayn.model.config import ModelConfig


def _attention(d: int) -> int:
    return 4 * (d * d + d)  # W_Q, W_K, W_V, W_O with biases


def _ffn(d: int, d_ff: int) -> int:
    return d * d_ff + d_ff + d_ff * d + d  # W1, b1, W2, b2


def count_parameters(config: ModelConfig) -> int:
    """Number of distinct trainable parameters of ``build_model(config)`` (tied weights counted once)."""
    c = config
    d, norm = c.d_model, 2 * c.d_model
    enc_layer = _attention(d) + _ffn(d, c.d_ff) + 2 * norm
    dec_layer = 2 * _attention(d) + _ffn(d, c.d_ff) + 3 * norm
    final = norm if c.norm == "pre" else 0
    learned = c.max_len * d if c.positions == "learned" else 0
    head_tied = c.share_embeddings != "none"
    if c.arch == "encoder-decoder":
        tables = c.vocab_size * d + (0 if c.share_embeddings == "all" else c.target_vocab * d)
        head = 0 if head_tied else c.target_vocab * d
        stacks = c.n_encoder_layers * enc_layer + c.n_decoder_layers * dec_layer + 2 * final
        return tables + head + stacks + 2 * learned
    head = 0 if head_tied else c.vocab_size * d
    if c.arch == "decoder-only":
        dec_layer -= _attention(d) + norm  # no cross-attention
        return c.vocab_size * d + head + c.n_decoder_layers * dec_layer + final + learned
    return c.vocab_size * d + head + c.n_encoder_layers * enc_layer + final + learned
