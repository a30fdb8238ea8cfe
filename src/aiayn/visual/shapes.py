"""The tensor shapes at every stage of one forward pass, read off the real modules with forward hooks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from aiayn.model.config import ModelConfig
from aiayn.model.transformer import EncoderDecoder

BATCH, SRC_LEN, TGT_LEN = 2, 7, 5  # distinct sizes, so every axis can be told apart

# (module path whose output is recorded, stage, equation, symbolic shape). Layer 1 stands for every layer.
HOOKED = [
    ("src_embed.tokens", "source token embeddings", "Emb(x) * sqrt(d_model)", "B, S, d_model"),
    ("src_embed", "+ positional encoding", "section 3.5", "B, S, d_model"),
    ("encoder.layers.0.self_attn.q_proj", "Q = x W^Q (K, V alike)", "section 3.2.2", "B, S, d_model"),
    ("encoder.layers.0.self_attn.out_proj", "Concat(heads) W^O", "section 3.2.2", "B, S, d_model"),
    ("encoder.layers.0.ffn.linear1", "FFN hidden max(0, x W1 + b1)", "equation (2)", "B, S, d_ff"),
    ("encoder.layers.0.ffn", "FFN output", "equation (2)", "B, S, d_model"),
    ("encoder.layers.0", "encoder layer output", "LayerNorm(x + Sublayer(x))", "B, S, d_model"),
    ("encoder", "memory (encoder output, N layers)", "section 3.1", "B, S, d_model"),
    ("tgt_embed", "target embeddings + positions", "section 3.4-3.5", "B, T, d_model"),
    ("decoder.layers.0.cross_attn.q_proj", "cross-attention Q from the decoder", "section 3.2.3", "B, T, d_model"),
    ("decoder.layers.0.cross_attn.k_proj", "cross-attention K from the memory", "section 3.2.3", "B, S, d_model"),
    ("decoder", "decoder output (N layers)", "section 3.1", "B, T, d_model"),
    ("output", "logits", "Linear (softmax gives next-token probabilities)", "B, T, V"),
]


@dataclass
class Stage:
    name: str
    equation: str
    symbols: str
    shape: tuple[int, ...]


def _record(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, tuple[int, ...]]:
    """Run ``model(src, tgt)`` once; return the output shape of every hooked module."""
    shapes: dict[str, tuple[int, ...]] = {}
    modules = dict(model.named_modules())

    def hook(name):
        def record(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            shapes.setdefault(name, tuple(out.shape))
        return record

    handles = [modules[name].register_forward_hook(hook(name)) for name, *_ in HOOKED]
    try:
        model(src, tgt)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


@torch.no_grad()
def trace_shapes(config: ModelConfig) -> list[Stage]:
    """Every stage of one forward pass of an encoder-decoder with ``config`` (B=2, S=7, T=5), in order."""
    model = EncoderDecoder(config).eval()
    src = torch.randint(5, config.vocab_size, (BATCH, SRC_LEN))  # (B, S)
    tgt = torch.randint(5, config.target_vocab, (BATCH, TGT_LEN))  # (B, T)
    shapes = _record(model, src, tgt)
    maps = model.attention_maps(src, tgt)
    q_proj = shapes["encoder.layers.0.self_attn.q_proj"]  # (B, S, d_model)
    q = model.encoder.layers[0].self_attn.split_heads(torch.zeros(q_proj))  # (B, H, S, d_k)
    per_head = [
        Stage("Q split into h heads", "section 3.2.2", "B, H, S, d_k", tuple(q.shape)),
        Stage("weights softmax(QK^T / sqrt(d_k)), per head", "equation (1)", "B, H, S, S",
              tuple(maps["encoder"][0].shape)),
    ]
    decoder_heads = [
        Stage("decoder self-attention weights (causal mask)", "section 3.2.3", "B, H, T, T",
              tuple(maps["decoder_self"][0].shape)),
        Stage("cross-attention weights", "section 3.2.3", "B, H, T, S", tuple(maps["cross"][0].shape)),
    ]
    stages = [Stage("source ids", "input", "B, S", tuple(src.shape))]
    for name, stage, equation, symbols in HOOKED:
        stages.append(Stage(stage, equation, symbols, shapes[name]))
        if name.endswith("self_attn.q_proj"):
            stages += per_head
        if name.endswith("cross_attn.k_proj"):
            stages += decoder_heads
        if name == "encoder":
            stages.append(Stage("target input ids (<s> y1 .. y_{T-1})", "input", "B, T", tuple(tgt.shape)))
    return stages


def symbol_sizes(config: ModelConfig) -> dict[str, int]:
    """What each symbol of the table stands for, with this config."""
    return {"B": BATCH, "S": SRC_LEN, "T": TGT_LEN, "H": config.n_heads, "d_k": config.d_model // config.n_heads,
            "d_model": config.d_model, "d_ff": config.d_ff, "V": config.target_vocab}


def format_table(stages: list[Stage], config: ModelConfig) -> str:
    """A plain-text table: stage | shape | symbols | equation; then the legend of the symbols."""
    header = ("stage", "shape", "symbols", "paper")
    rows = [header] + [(s.name, str(s.shape), f"({s.symbols})", s.equation) for s in stages]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    legend = ", ".join(f"{k}={v}" for k, v in symbol_sizes(config).items())
    return "\n".join(lines) + f"\n\n{legend}; N={config.n_encoder_layers}+{config.n_decoder_layers} layers\n"
