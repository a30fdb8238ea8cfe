"""GPT-2 -> aiayn's decoder-only model: learned positions, pre-norm with a final LayerNorm, GELU with the
tanh approximation (``activation="gelu_tanh"``), unscaled embeddings (``scale_embeddings=False``), the
output tied to the token embedding. Conv1D weights are stored (in, out) and are transposed; the fused
query/key/value projection is split. GPT-2 has one special token, ``<|endoftext|>`` (EOS, and the start of
a document); it has no padding token, so one zero row is appended for padding (``pad_id``, never generated:
the logits of the real vocabulary are GPT-2's)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats.hf_folder import folder_tokenizers, load_mapped, read_weights, take
from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("gpt2",)  # config.json's model_type (formats/families.py)

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_config(hf: dict) -> ModelConfig:
    """aiayn's config for a Hugging Face ``GPT2Config`` (as a dict); what aiayn cannot express is an error."""
    if hf.get("activation_function") not in ACTIVATIONS:
        raise ValueError(f"config.json: activation_function {hf.get('activation_function')!r} is not supported; "
                         f"aiayn has {', '.join(ACTIVATIONS)}")
    for flag in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if hf.get(flag):
            raise ValueError(f"config.json: {flag} is not supported")
    if not hf.get("scale_attn_weights", True):
        raise ValueError("config.json: scale_attn_weights false is not supported (aiayn scales by 1/sqrt(d_k))")
    pad = hf["vocab_size"]  # the appended padding row
    d = hf["n_embd"]
    return ModelConfig(
        arch="decoder-only", vocab_size=pad + 1, d_model=d, n_heads=hf["n_head"], n_encoder_layers=0,
        n_decoder_layers=hf["n_layer"], d_ff=hf.get("n_inner") or 4 * d, dropout=hf.get("resid_pdrop", 0.1),
        activation=ACTIVATIONS[hf["activation_function"]], norm="pre", positions="learned",
        share_embeddings="all", max_len=hf["n_positions"], layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        scale_embeddings=False, pad_id=pad, bos_id=pad, unk_id=pad, eos_id=hf["eos_token_id"], padding_row=True)


def gpt2_state_dict(w: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """aiayn's parameter names -> the GPT-2 tensors (``transformer.`` prefix or none)."""
    prefix = "transformer." if any(k.startswith("transformer.") for k in w) else ""
    wte = take(w, prefix + "wte.weight")
    tokens = torch.cat([wte, wte.new_zeros(1, wte.size(1))])  # (V + 1, D): the padding row
    out = {"embed.tokens.weight": tokens, "output.weight": tokens,
           "embed.positions.table.weight": take(w, prefix + "wpe.weight"),
           "decoder.norm.weight": take(w, prefix + "ln_f.weight"), "decoder.norm.bias": take(w, prefix + "ln_f.bias")}
    for i in range(cfg.n_decoder_layers):
        hf, ours = f"{prefix}h.{i}.", f"decoder.layers.{i}."
        qkv_w = take(w, hf + "attn.c_attn.weight").t()  # Conv1D (D, 3D) -> Linear (3D, D)
        qkv_b = take(w, hf + "attn.c_attn.bias")
        for name, weight, bias in zip(("q_proj", "k_proj", "v_proj"), qkv_w.chunk(3), qkv_b.chunk(3), strict=True):
            out[f"{ours}self_attn.{name}.weight"], out[f"{ours}self_attn.{name}.bias"] = weight, bias
        for theirs, mine in (("attn.c_proj", "self_attn.out_proj"), ("mlp.c_fc", "ffn.linear1"),
                             ("mlp.c_proj", "ffn.linear2")):
            out[f"{ours}{mine}.weight"] = take(w, f"{hf}{theirs}.weight").t()  # Conv1D (in, out) -> (out, in)
            out[f"{ours}{mine}.bias"] = take(w, f"{hf}{theirs}.bias")
        for theirs, mine in (("ln_1", "res_self.norm"), ("ln_2", "res_ffn.norm")):
            for kind in ("weight", "bias"):
                out[f"{ours}{mine}.{kind}"] = take(w, f"{hf}{theirs}.{kind}")
    return out


def gpt2_model(cfg: ModelConfig, weights: dict[str, Tensor]) -> DecoderOnly:
    """aiayn's model of ``cfg`` holding GPT-2's tensors (Hugging Face names)."""
    model = DecoderOnly(cfg)
    load_mapped(model, gpt2_state_dict(weights, cfg))
    return model.eval()


def import_gpt2(folder: Path, hf: dict) -> tuple[DecoderOnly, HFTokenizers]:
    weights, tokenizers = read_weights(folder), folder_tokenizers(folder, hf)
    return gpt2_model(gpt2_config(hf), weights), tokenizers


def gpt2_problems(cfg: ModelConfig) -> list[str]:
    """What a ``GPT2LMHeadModel`` cannot express of ``cfg`` (empty: it exports)."""
    checks = [(cfg.arch == "decoder-only", f"arch {cfg.arch}"), (cfg.norm == "pre", "norm post"),
              (cfg.norm_type == "layernorm", f"norm_type {cfg.norm_type}"),
              (cfg.feed_forward == "standard", f"feed_forward {cfg.feed_forward}"),
              (cfg.positions == "learned", f"positions {cfg.positions} (GPT-2 has a learned table)"),
              (not cfg.scale_embeddings, "scale_embeddings"), (cfg.share_embeddings != "none", "an untied output"),
              (cfg.qkv_bias and cfg.out_bias and cfg.ffn_bias, "projections without biases"),
              (cfg.n_kv_heads in (None, cfg.n_heads) and cfg.head_dim in (None, cfg.d_model // cfg.n_heads),
               "n_kv_heads / head_dim"), (cfg.sliding_window is None, "sliding_window"),
              (cfg.activation in HF_ACTIVATIONS, f"activation {cfg.activation}"),
              (not cfg.output_bias and not cfg.embedding_norm and not cfg.output_transform,
               "output_bias / embedding_norm / output_transform"),
              (cfg.scale_attention, "scale_attention false (unscaled dot products)")]
    return [problem for ok, problem in checks if not ok]


HF_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}


def export_gpt2(model: DecoderOnly, vocab: int, folder: Path) -> None:
    """Save ``model`` as a Hugging Face ``GPT2LMHeadModel`` folder (its first ``vocab`` token rows)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = model.config
    hf = GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab, n_embd=cfg.d_model, n_layer=cfg.n_decoder_layers, n_head=cfg.n_heads, n_inner=cfg.d_ff,
        n_positions=cfg.max_len, activation_function=HF_ACTIVATIONS[cfg.activation],
        layer_norm_epsilon=cfg.layer_norm_eps, bos_token_id=cfg.bos_id, eos_token_id=cfg.eos_id)).eval()
    hf.load_state_dict(gpt2_tensors(model, vocab), strict=False)  # lm_head: tied to wte
    hf.save_pretrained(folder)


def gpt2_tensors(model: DecoderOnly, vocab: int) -> dict[str, Tensor]:
    """GPT-2's tensor names -> the model's (``gpt2_state_dict`` backwards): Linear (out, in) becomes Conv1D
    (in, out), q/k/v fuse into ``c_attn``, the token table keeps its first ``vocab`` rows."""
    own = {name: t.detach().float() for name, t in model.state_dict().items()}
    out = {"transformer.wte.weight": own["embed.tokens.weight"][:vocab],
           "transformer.wpe.weight": own["embed.positions.table.weight"],
           "transformer.ln_f.weight": own["decoder.norm.weight"], "transformer.ln_f.bias": own["decoder.norm.bias"]}
    for i in range(model.config.n_decoder_layers):
        hf, ours = f"transformer.h.{i}.", f"decoder.layers.{i}."
        qkv = [f"{ours}self_attn.{p}_proj" for p in "qkv"]
        out[hf + "attn.c_attn.weight"] = torch.cat([own[n + ".weight"] for n in qkv]).t()  # (D, 3D)
        out[hf + "attn.c_attn.bias"] = torch.cat([own[n + ".bias"] for n in qkv])
        for theirs, mine in (("attn.c_proj", "self_attn.out_proj"), ("mlp.c_fc", "ffn.linear1"),
                             ("mlp.c_proj", "ffn.linear2")):
            out[f"{hf}{theirs}.weight"] = own[f"{ours}{mine}.weight"].t()  # (out, in) -> Conv1D (in, out)
            out[f"{hf}{theirs}.bias"] = own[f"{ours}{mine}.bias"]
        for theirs, mine in (("ln_1", "res_self.norm"), ("ln_2", "res_ffn.norm")):
            for kind in ("weight", "bias"):
                out[f"{hf}{theirs}.{kind}"] = own[f"{ours}{mine}.{kind}"]
    return {k: v.contiguous() for k, v in out.items()}
