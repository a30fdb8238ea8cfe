"""Marian (OPUS-MT) -> aiayn's encoder-decoder. What differs from the paper, each a named config option:
sinusoids with every sin before every cos (``sinusoid_layout="halves"``), SiLU ("swish") in the FFN
(``activation="silu"``), ``final_logits_bias`` (``output_bias``), embeddings scaled or not
(``scale_embeddings``), and its special ids: ``</s>`` 0, ``<unk>`` 1, pad the last id, decoding starting
from pad (``bos_id = pad_id``). The rest is the paper's post-norm Transformer with biases everywhere."""

from __future__ import annotations

from itertools import product
from pathlib import Path

from torch import Tensor

from aiayn.formats.hf_folder import load_mapped, read_weights, take
from aiayn.model.config import ModelConfig
from aiayn.model.transformer import EncoderDecoder
from aiayn.tokenizers.marian import MarianTokenizers

MODEL_TYPES = ("marian",)  # config.json's model_type (formats/families.py)

ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
LAYER_PARTS = {"self_attn": "self_attn", "encoder_attn": "cross_attn", "fc1": "ffn.linear1", "fc2": "ffn.linear2"}
ENCODER_NORMS = {"self_attn_layer_norm": "res_attn.norm", "final_layer_norm": "res_ffn.norm"}
DECODER_NORMS = {"self_attn_layer_norm": "res_self.norm", "encoder_attn_layer_norm": "res_cross.norm",
                 "final_layer_norm": "res_ffn.norm"}


def marian_config(hf: dict, unk_id: int) -> ModelConfig:
    """aiayn's config for a Hugging Face ``MarianConfig`` (as a dict); what aiayn cannot express is an error."""
    def same(a: str, b: str):
        if hf.get(a) != hf.get(b):
            raise ValueError(f"config.json: {a} ({hf.get(a)}) != {b} ({hf.get(b)}); aiayn needs them equal")
        return hf[a]

    if hf.get("activation_function") not in ACTIVATIONS:
        raise ValueError(f"config.json: activation_function {hf.get('activation_function')!r} is not supported; "
                         f"aiayn has {', '.join(ACTIVATIONS)}")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        raise ValueError("config.json: pre-norm / extra layer norms are not Marian's OPUS-MT layout; not supported")
    vocab = hf["vocab_size"]
    separate = not hf.get("share_encoder_decoder_embeddings", True)
    if separate:
        raise ValueError("config.json: share_encoder_decoder_embeddings false (separate source and target "
                         "vocabularies) is not supported yet; aiayn imports Marian models with one vocab.json")
    tied = hf.get("tie_word_embeddings", True)
    return ModelConfig(
        arch="encoder-decoder", vocab_size=vocab,
        d_model=hf["d_model"], n_heads=same("encoder_attention_heads", "decoder_attention_heads"),
        n_encoder_layers=hf["encoder_layers"], n_decoder_layers=hf["decoder_layers"],
        d_ff=same("encoder_ffn_dim", "decoder_ffn_dim"), dropout=hf.get("dropout", 0.1),
        activation=ACTIVATIONS[hf["activation_function"]], norm="post", positions="sinusoidal",
        share_embeddings="all" if tied else "none",
        max_len=hf.get("max_position_embeddings", 512), scale_embeddings=bool(hf.get("scale_embedding", False)),
        sinusoid_layout="halves", output_bias=True, pad_id=hf["pad_token_id"], bos_id=hf["decoder_start_token_id"],
        eos_id=hf["eos_token_id"], unk_id=unk_id)


def layer_names(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(aiayn name, Marian name) of every encoder and decoder layer tensor; one table for import and export."""
    names = []
    for side, n, norms in (("encoder", cfg.n_encoder_layers, ENCODER_NORMS),
                           ("decoder", cfg.n_decoder_layers, DECODER_NORMS)):
        parts = {**LAYER_PARTS, **norms}
        if side == "encoder":
            del parts["encoder_attn"]
        for i, (theirs, mine), kind in product(range(n), parts.items(), ("weight", "bias")):
            projections = ("q_proj.", "k_proj.", "v_proj.", "out_proj.") if theirs.endswith("attn") else ("",)
            names += [(f"{side}.layers.{i}.{mine}.{p}{kind}", f"model.{side}.layers.{i}.{theirs}.{p}{kind}")
                      for p in projections]
    return names


def marian_state_dict(w: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """aiayn's parameter names -> the Marian tensors."""
    shared = take(w, "model.shared.weight", "model.encoder.embed_tokens.weight")
    out = {"src_embed.tokens.weight": shared, "tgt_embed.tokens.weight": shared,
           "output.weight": take(w, "lm_head.weight") if cfg.share_embeddings == "none" else shared,
           "output.bias": take(w, "final_logits_bias")[0]}
    return out | {ours: take(w, theirs) for ours, theirs in layer_names(cfg)}


def import_marian(folder: Path, hf: dict) -> tuple[EncoderDecoder, MarianTokenizers]:
    weights = read_weights(folder)
    tokenizers = MarianTokenizers.load(folder)
    cfg = marian_config(hf, tokenizers.src.unk_id)
    if len(tokenizers.src) != cfg.vocab_size:
        raise ValueError(f"{folder / 'vocab.json'}: {len(tokenizers.src)} pieces, config.json says vocab_size "
                         f"{cfg.vocab_size}")
    model = EncoderDecoder(cfg)
    load_mapped(model, marian_state_dict(weights, cfg))
    return model.eval(), tokenizers
