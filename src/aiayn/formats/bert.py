"""BERT (``BertForMaskedLM``, or ``BertModel`` without the head, as sentence-transformers folders hold it) ->
aiayn's encoder-only model: post-norm as the paper, learned positions, a
LayerNorm on the embeddings (``embedding_norm``), GELU, unscaled embeddings, and the masked-LM head's own
dense + GELU + LayerNorm before the tied output with its bias (``output_transform``, ``output_bias``).
Token-type embeddings: aiayn feeds one segment, so type 0's row is added into the position table (exact for
single-text input, which is what fill-mask gives). Special ids come from the tokenizer: [PAD], [UNK],
[CLS] (as BOS), [SEP] (as EOS), [MASK]. A ``BertModel`` (tensor names without ``bert.``, no ``cls.`` head)
imports without the masked-LM head: its use is the hidden states (``aiayn.inference.embed``); the pooler is
not read (sentence embeddings pool the token states)."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from aiayn.formats.hf_folder import folder_tokenizers, load_mapped, read_weights, take
from aiayn.model.config import ModelConfig
from aiayn.model.transformer import EncoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("bert",)  # config.json's model_type (formats/families.py)

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu", "silu": "silu"}
SPECIALS = {"pad_id": "[PAD]", "unk_id": "[UNK]", "bos_id": "[CLS]", "eos_id": "[SEP]", "mask_id": "[MASK]"}
PARTS = {"attention.self.query": "self_attn.q_proj", "attention.self.key": "self_attn.k_proj",
         "attention.self.value": "self_attn.v_proj", "attention.output.dense": "self_attn.out_proj",
         "attention.output.LayerNorm": "res_attn.norm", "intermediate.dense": "ffn.linear1",
         "output.dense": "ffn.linear2", "output.LayerNorm": "res_ffn.norm"}


def bert_config(hf: dict, tokenizers: HFTokenizers, head: bool = True) -> ModelConfig:
    """aiayn's config for a Hugging Face ``BertConfig`` (as a dict) and its tokenizer's special ids."""
    if hf.get("hidden_act") not in ACTIVATIONS:
        raise ValueError(f"config.json: hidden_act {hf.get('hidden_act')!r} is not supported; aiayn has "
                         f"{', '.join(ACTIVATIONS)}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"config.json: position_embedding_type {hf['position_embedding_type']!r} is not supported")
    ids = {}
    for field, token in SPECIALS.items():
        ids[field] = tokenizers.src.token_id(token)
        if ids[field] is None:
            raise ValueError(f"tokenizer.json: no {token} token; a BERT tokenizer has {', '.join(SPECIALS.values())}")
    return ModelConfig(
        arch="encoder-only", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"], n_encoder_layers=hf["num_hidden_layers"], n_decoder_layers=0,
        d_ff=hf["intermediate_size"], dropout=hf.get("hidden_dropout_prob", 0.1),
        activation=ACTIVATIONS[hf["hidden_act"]], norm="post", positions="learned", share_embeddings="all",
        max_len=hf["max_position_embeddings"], layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        scale_embeddings=False, embedding_norm=True, output_transform=head, output_bias=head, **ids)


def has_mlm_head(w: dict[str, Tensor]) -> bool:
    """A ``BertForMaskedLM`` checkpoint (its ``cls.predictions`` head), not a bare ``BertModel``."""
    return any(name.startswith("cls.predictions.") for name in w)


def bert_state_dict(w: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """aiayn's parameter names -> the BERT tensors (``bert.``-prefixed with the MLM head, or a bare BertModel's)."""
    prefix = "bert." if any(name.startswith("bert.") for name in w) else ""
    emb = prefix + "embeddings."
    words = take(w, emb + "word_embeddings.weight")
    positions = take(w, emb + "position_embeddings.weight") + take(w, emb + "token_type_embeddings.weight")[0]
    out = {"embed.tokens.weight": words, "output.weight": words, "embed.positions.table.weight": positions,
           "embed.norm.weight": take(w, emb + "LayerNorm.weight"), "embed.norm.bias": take(w, emb + "LayerNorm.bias")}
    if cfg.output_transform:
        out["output.bias"] = take(w, "cls.predictions.bias", "cls.predictions.decoder.bias")
    for kind in ("weight", "bias"):
        if cfg.output_transform:
            out[f"transform.dense.{kind}"] = take(w, f"cls.predictions.transform.dense.{kind}")
            out[f"transform.norm.{kind}"] = take(w, f"cls.predictions.transform.LayerNorm.{kind}")
        for i in range(cfg.n_encoder_layers):
            for theirs, mine in PARTS.items():
                out[f"encoder.layers.{i}.{mine}.{kind}"] = take(w, f"{prefix}encoder.layer.{i}.{theirs}.{kind}")
    return out


def import_bert(folder: Path, hf: dict) -> tuple[EncoderOnly, HFTokenizers]:
    weights, tokenizers = read_weights(folder), folder_tokenizers(folder, hf)
    cfg = bert_config(hf, tokenizers, head=has_mlm_head(weights))
    model = EncoderOnly(cfg)
    load_mapped(model, bert_state_dict(weights, cfg))
    return model.eval(), tokenizers
