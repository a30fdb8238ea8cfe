"""T5 (Raffel et al. 2020) in and out: a Hugging Face ``T5ForConditionalGeneration`` folder (T5 v1.0, v1.1, Flan-T5,
mT5) becomes aiayn's encoder-decoder, and back. What differs from the paper, each a named config option:
pre-norm with RMSNorm (``norm="pre"``, ``norm_type="rmsnorm"``), relative position biases instead of sinusoids
(``positions="relative"``), no scaling of the attention logits (``scale_attention=False``: T5 folds it into the
initialisation) nor of the embeddings, no biases anywhere, ReLU (v1.0) or gated-GELU (v1.1: ``feed_forward="swiglu"``
with ``activation="gelu_tanh"``) feed-forward layers, one embedding for both stacks with the output tied to it and
rescaled by d_model ** -0.5 (v1.0: ``share_embeddings="all"``, ``rescale_output``) or an output of its own (v1.1:
``share_embeddings="inputs"``), and decoding starting from ``<pad>`` (``bos_id = pad_id = 0``, ``eos_id`` 1).

One table of tensor names (:func:`layer_names`) serves import, export and PEFT's module names.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats.hf_folder import load_mapped, read_weights, take
from aiayn.model.config import ModelConfig
from aiayn.model.transformer import EncoderDecoder
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("t5", "mt5")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}
ATTENTION = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "out_proj": "o"}
FFN = {"linear1": "wi", "linear2": "wo"}
GATED_FFN = {"gate_proj": "wi_0", "up_proj": "wi_1", "down_proj": "wo"}
SPIECE = "spiece.model"


def _activation(hf: dict) -> tuple[str, bool]:
    """aiayn's activation and whether the feed-forward layer is gated, from ``feed_forward_proj``."""
    proj = str(hf.get("feed_forward_proj", "relu"))
    gated, _, name = proj.rpartition("-")
    if gated not in ("", "gated"):
        raise ValueError(f"config.json: feed_forward_proj {proj!r} is not 'ACT' or 'gated-ACT'")
    name = "gelu_new" if proj == "gated-gelu" else name  # Hugging Face's own rule for v1.1 checkpoints
    if name not in ACTIVATIONS:
        raise ValueError(f"config.json: feed_forward_proj {proj!r}: activation {name!r} is not supported; aiayn has "
                         f"{', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name], gated == "gated"


def t5_config(hf: dict, unk_id: int, untied: bool) -> ModelConfig:
    """aiayn's config for a Hugging Face ``T5Config`` (as a dict); ``untied``: the folder has an output
    projection of its own (``lm_head.weight`` unlike ``shared.weight``)."""
    activation, gated = _activation(hf)
    rescale = hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True) is not False)  # 5.x, else 4.x
    return ModelConfig(
        arch="encoder-decoder", vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["num_heads"],
        head_dim=hf["d_kv"], n_encoder_layers=hf["num_layers"],
        n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"], d_ff=hf["d_ff"],
        dropout=hf.get("dropout_rate", 0.1), activation=activation, norm="pre", norm_type="rmsnorm",
        layer_norm_eps=hf.get("layer_norm_epsilon", 1e-6), feed_forward="swiglu" if gated else "standard",
        positions="relative", relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128), qkv_bias=False, out_bias=False,
        ffn_bias=False, scale_attention=False, scale_embeddings=False,
        share_embeddings="inputs" if untied else "all", rescale_output=bool(rescale),
        max_len=hf.get("n_positions", 512),
        pad_id=hf.get("pad_token_id", 0), bos_id=hf.get("decoder_start_token_id", 0), eos_id=_first(hf, "eos_token_id"),
        unk_id=unk_id)


def _first(hf: dict, key: str) -> int:
    value = hf.get(key, 1)
    return value[0] if isinstance(value, list) else value


def layer_names(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(aiayn name, T5 name) of every weight of both stacks, position biases and final norms included."""
    ffn = GATED_FFN if cfg.feed_forward == "swiglu" else FFN
    names = []
    for side, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        blocks = [("self_attn", "SelfAttention", "res_attn" if side == "encoder" else "res_self")]
        if side == "decoder":
            blocks.append(("cross_attn", "EncDecAttention", "res_cross"))
        for i in range(n):
            for j, (mine, theirs, residual) in enumerate(blocks):
                block = f"{side}.block.{i}.layer.{j}"
                names += [(f"{side}.layers.{i}.{mine}.{p}.weight", f"{block}.{theirs}.{q}.weight")
                          for p, q in ATTENTION.items()]
                names.append((f"{side}.layers.{i}.{residual}.norm.weight", f"{block}.layer_norm.weight"))
            j = len(blocks)
            names += [(f"{side}.layers.{i}.ffn.{p}.weight", f"{side}.block.{i}.layer.{j}.DenseReluDense.{q}.weight")
                      for p, q in ffn.items()]
            names.append((f"{side}.layers.{i}.res_ffn.norm.weight", f"{side}.block.{i}.layer.{j}.layer_norm.weight"))
        names.append((f"{side}.position_bias.table.weight",
                      f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"))
        names.append((f"{side}.norm.weight", f"{side}.final_layer_norm.weight"))
    return names


def t5_state_dict(w: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """aiayn's parameter names -> the T5 tensors."""
    shared = take(w, "shared.weight", "encoder.embed_tokens.weight")
    out = {"src_embed.tokens.weight": shared, "tgt_embed.tokens.weight": shared,
           "output.weight": take(w, "lm_head.weight") if cfg.share_embeddings == "inputs" else shared}
    return out | {ours: take(w, theirs) for ours, theirs in layer_names(cfg)}


def _untied(weights: dict[str, Tensor]) -> bool:
    head, shared = weights.get("lm_head.weight"), take(weights, "shared.weight", "encoder.embed_tokens.weight")
    return head is not None and not torch.equal(head, shared)


def t5_tokenizers(folder: Path, hf: dict) -> HFTokenizers:
    """The folder's ``tokenizer.json``, or one made from its ``spiece.model`` (T5's SentencePiece unigram model
    with ``</s>`` after every text and the ``<extra_id_N>`` sentinels after the pieces, as T5's tokenizer has)."""
    if (folder / "tokenizer.json").is_file() or not (folder / SPIECE).is_file():
        return HFTokenizers.load(folder)
    from aiayn.tokenizers.hf import CONFIG, _read_config

    config = _read_config(folder / CONFIG)
    extra = json.loads(config).get("extra_ids", 100) if config else 100
    return HFTokenizers(spiece_tokenizer_json((folder / SPIECE).read_bytes(), extra, folder / SPIECE), config)


def spiece_tokenizer_json(spiece: bytes, extra_ids: int, source: Path) -> str:
    """A SentencePiece unigram model as a ``tokenizer.json`` text with T5's conventions: its normaliser (the
    precompiled character map), words split at whitespace, each led by the word-start marker, ``</s>`` appended."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(spiece)
    except Exception:  # protobuf's DecodeError: not a model
        raise ValueError(f"{source}: not a SentencePiece model") from None
    spec = proto.trainer_spec
    if spec.model_type != spec.UNIGRAM or not proto.pieces:
        raise ValueError(f"{source}: T5's tokenizer is a SentencePiece unigram model; this one is not")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    tok = Tokenizer(models.Unigram(pieces, unk_id=spec.unk_id, byte_fallback=spec.byte_fallback))
    charsmap = proto.normalizer_spec.precompiled_charsmap
    if charsmap:
        tok.normalizer = normalizers.Precompiled(charsmap)
    prepend = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    tok.pre_tokenizer = pre_tokenizers.Sequence([  # words at whitespace, each led by the word-start marker
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=prepend)])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=prepend)
    eos = pieces[spec.eos_id][0]
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A {eos} $B {eos}",
                                                       special_tokens=[(eos, spec.eos_id)])
    specials = [pieces[i][0] for i in (spec.pad_id, spec.eos_id, spec.unk_id) if 0 <= i < len(pieces)]
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    tok.add_special_tokens([AddedToken(f"<extra_id_{i}>", special=True) for i in reversed(range(extra_ids))])
    return tok.to_str()


def import_t5(folder: Path, hf: dict) -> tuple[EncoderDecoder, HFTokenizers]:
    weights = read_weights(folder)
    tokenizers = t5_tokenizers(folder, hf)
    if len(tokenizers.src) > hf["vocab_size"]:
        raise ValueError(f"{folder}: the tokenizer has {len(tokenizers.src)} tokens, config.json's vocab_size is "
                         f"{hf['vocab_size']}")
    unk = tokenizers.src.token_id("<unk>")
    cfg = t5_config(hf, 2 if unk is None else unk, _untied(weights))
    model = EncoderDecoder(cfg)
    load_mapped(model, t5_state_dict(weights, cfg))
    return model.eval(), tokenizers


def t5_problems(cfg: ModelConfig) -> list[str]:
    """The options of ``cfg`` that a T5 model cannot express (empty: it can be exported as one)."""
    gated = cfg.feed_forward == "swiglu"
    checks = [(cfg.arch == "encoder-decoder", f"arch {cfg.arch} (T5 is an encoder-decoder)"),
              (cfg.norm == "pre" and cfg.norm_type == "rmsnorm", "norm (T5 is pre-norm with RMSNorm)"),
              (cfg.positions == "relative", f"positions {cfg.positions} (T5 has relative position biases)"),
              (not (cfg.qkv_bias or cfg.out_bias or cfg.ffn_bias or cfg.output_bias), "biases (T5 has none)"),
              (not cfg.scale_attention, "scale_attention (T5 does not divide by sqrt(d_k))"),
              (not cfg.scale_embeddings, "scale_embeddings (T5 does not scale its embeddings)"),
              (cfg.kv_heads == cfg.n_heads, "grouped-query attention"),
              (cfg.share_embeddings in ("all", "inputs"), f"share_embeddings {cfg.share_embeddings} (T5 shares one "
                                                           "embedding between its stacks)"),
              (not gated or cfg.activation == "gelu_tanh", f"gated {cfg.activation} (T5's gated unit is GELU-tanh)"),
              (not cfg.embedding_norm and not cfg.output_transform and not cfg.sliding_window,
               "embedding_norm / output_transform / sliding_window")]
    return [problem for ok, problem in checks if not ok]


def hf_t5_config(cfg: ModelConfig) -> dict:
    """The Hugging Face ``T5Config`` fields of ``cfg`` (T5's own when tied; Flan-T5's when untied)."""
    gated = cfg.feed_forward == "swiglu"
    act = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}[cfg.activation]
    return dict(architectures=["T5ForConditionalGeneration"], model_type="t5", vocab_size=cfg.vocab_size,
                d_model=cfg.d_model, d_kv=cfg.d_head, d_ff=cfg.d_ff, num_layers=cfg.n_encoder_layers,
                num_decoder_layers=cfg.n_decoder_layers, num_heads=cfg.n_heads,
                relative_attention_num_buckets=cfg.relative_buckets,
                relative_attention_max_distance=cfg.relative_max_distance, dropout_rate=cfg.dropout,
                layer_norm_epsilon=cfg.layer_norm_eps, feed_forward_proj="gated-gelu" if gated else act,
                is_encoder_decoder=True, tie_word_embeddings=cfg.share_embeddings == "all",
                scale_decoder_outputs=cfg.rescale_output, pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id,
                decoder_start_token_id=cfg.bos_id)


def export_t5(model: EncoderDecoder, folder: Path) -> None:
    """Write ``model`` as a T5 folder (``config.json`` + ``model.safetensors``) into ``folder``: tensors under
    Hugging Face's names, the shared embedding once, ``lm_head.weight`` only when it is the model's own."""
    from safetensors.torch import save_file

    cfg, own = model.config, {name: t.detach().float().contiguous() for name, t in model.state_dict().items()}
    tensors = {theirs: own[ours] for ours, theirs in layer_names(cfg)}
    tensors["shared.weight"] = own["src_embed.tokens.weight"]
    if cfg.share_embeddings == "inputs":
        tensors["lm_head.weight"] = own["output.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_t5_config(cfg), indent=2) + "\n", encoding="utf-8")
