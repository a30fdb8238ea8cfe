"""Gemma 3 (``Gemma3ForCausalLM``, model_type ``gemma3_text``) and Gemma 2 (``gemma2``: no q/k norms, one rotary
base, a query scale of its own and soft-capped attention scores and logits) -> aiayn's decoder-only model: the
LLaMA branch
(``formats/llama.py``'s tensor table) with Gemma's options: sandwich norms (``norm="sandwich"``), q/k norms,
a GeLU-tanh gated feed-forward, embeddings times sqrt(d_model), and layers of two kinds (five sliding-window
layers to a full one, ``layer_types``), the sliding ones with a rotary base of their own (``local_position_base``).

Gemma's RMSNorm multiplies by (1 + w) where LLaMA's multiplies by w, so each norm's gain is read as 1 + w: the
same function, one convention in the model. Its vocabulary has a padding token of its own (id 0): no row is
appended.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from torch import Tensor

from aiayn.formats.llama import ACTIVATIONS, import_llama
from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("gemma3_text", "gemma3", "gemma2")  # gemma3: the text part of the multimodal folder
VISION = ("vision_tower.", "multi_modal_projector.")  # a multimodal gemma3's image parts, not imported
LAYER_TYPES = {"sliding_attention": "sliding", "full_attention": "full"}


def _refuse(hf: dict) -> None:
    """What aiayn does not build of a Gemma 2 or 3 config, each refused by name."""
    if hf.get("use_bidirectional_attention"):
        raise ValueError("config.json: use_bidirectional_attention (EmbeddingGemma) is not supported")
    if hf.get("hidden_activation", "gelu_pytorch_tanh") not in ACTIVATIONS:
        raise ValueError(f"config.json: hidden_activation {hf.get('hidden_activation')!r} is not supported")


def _ropes(hf: dict) -> tuple[float, float, dict | None]:
    """(the full layers' rotary base, the sliding layers', the full layers' scaling) from ``rope_parameters`` per
    layer type (transformers 5) or ``rope_theta``, ``rope_local_base_freq`` and ``rope_scaling`` (before)."""
    params = hf.get("rope_parameters") or {}
    if "rope_theta" in params:  # one rotary embedding for every layer (Gemma 2)
        params = {"full_attention": params, "sliding_attention": params}
    full = params.get("full_attention") or {"rope_theta": hf.get("rope_theta", 1_000_000.0),
                                            **(hf.get("rope_scaling") or {})}
    local = params.get("sliding_attention") or {"rope_theta": hf.get("rope_local_base_freq", hf.get(
        "rope_theta", 10_000.0) if hf["model_type"] == "gemma2" else 10_000.0)}
    for name, rope in (("full", full), ("sliding", local)):
        kind = rope.get("rope_type") or rope.get("type") or "default"
        if kind not in ("default", "linear") or (name == "sliding" and kind != "default"):
            raise ValueError(f"config.json: rope scaling {kind!r} of the {name} layers is not supported")
    scaling = {"type": "linear", "factor": float(full["factor"])} if (
        full.get("rope_type") or full.get("type")) == "linear" else None
    return float(full["rope_theta"]), float(local["rope_theta"]), scaling


def layer_pattern(layers: int, every: int) -> tuple[str, ...]:
    """Gemma's layer kinds when a config (or a GGUF file) gives only the period: every ``every``-th layer full, the
    others sliding."""
    return tuple("full" if (i + 1) % every == 0 else "sliding" for i in range(layers))


def gemma_config(hf: dict, unk_id: int | None) -> ModelConfig:
    """aiayn's config for a Gemma 3 text ``config.json`` (as a dict); ``unk_id``: the tokenizer's."""
    _refuse(hf)
    theta, local_theta, scaling = _ropes(hf)
    heads, layers = hf["num_attention_heads"], hf["num_hidden_layers"]
    pattern = 2 if hf["model_type"] == "gemma2" else hf.get("sliding_window_pattern", 6)  # Gemma 2 alternates
    kinds = tuple(LAYER_TYPES[k] for k in hf["layer_types"]) if hf.get("layer_types") else layer_pattern(layers,
                                                                                                       pattern)
    head_dim = hf.get("head_dim", 256)
    ends = hf.get("eos_token_id")
    ends = list(dict.fromkeys(ends)) if isinstance(ends, list) else [ends]
    pad = hf.get("pad_token_id", 0)
    return ModelConfig(
        arch="decoder-only", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_heads=heads,
        n_encoder_layers=0, n_decoder_layers=layers, d_ff=hf["intermediate_size"], dropout=0.0,
        activation=ACTIVATIONS[hf.get("hidden_activation", "gelu_pytorch_tanh")], norm="sandwich",
        norm_type="rmsnorm", feed_forward="swiglu", n_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=head_dim, positions="rope", position_base=theta, rope_layout="halves",
        rope_scaling=scaling, local_position_base=local_theta, qkv_bias=bool(hf.get("attention_bias", False)),
        out_bias=bool(hf.get("attention_bias", False)), ffn_bias=False, qk_norm=hf["model_type"] != "gemma2",
        query_scale=None if hf.get("query_pre_attn_scalar", head_dim) == head_dim else hf["query_pre_attn_scalar"],
        attention_softcap=hf.get("attn_logit_softcapping"), logit_softcap=hf.get("final_logit_softcapping"),
        sliding_window=hf.get("sliding_window", 4096), layer_types=kinds,
        share_embeddings="all" if hf.get("tie_word_embeddings", True) else "none",
        max_len=hf.get("max_position_embeddings", 131072), layer_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        scale_embeddings=True, pad_id=pad, bos_id=hf.get("bos_token_id", 2), eos_id=ends[0],
        unk_id=pad if unk_id is None else unk_id, mask_id=pad, pad_is_token=True,
        stop_ids=tuple(ends[1:]))


def gains_as_one_plus(tensors: Iterable[tuple[str, Tensor]],
                      cfg: ModelConfig | None = None) -> Iterator[tuple[str, Tensor]]:
    """Each norm's weight w read as the gain 1 + w (Gemma's RMSNorm: x_hat * (1 + w))."""
    for name, tensor in tensors:
        yield name, (tensor.float() + 1.0 if name.endswith("norm.weight") else tensor)


def import_gemma(folder: Path, hf: dict) -> tuple[DecoderOnly, HFTokenizers]:
    """A Gemma 2 or 3 text folder; of a multimodal Gemma 3 (``Gemma3ForConditionalGeneration``), its language
    model alone: the vision tower and its projector are left out, and said so on stderr."""
    if hf["model_type"] != "gemma3":
        return import_llama(folder, hf, gemma_config, gains_as_one_plus)
    text = {**{k: hf[k] for k in ("eos_token_id", "bos_token_id", "pad_token_id") if k in hf},
            **(hf.get("text_config") or {}), "model_type": "gemma3_text"}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
        if key not in text:
            raise ValueError(f"config.json: text_config.{key} is missing (a multimodal Gemma 3 folder's language "
                             "model)")
    if hf.get("vision_config") is not None:
        print(f"{folder}: aiayn imports the text model; the vision tower (vision_config) is left out",
              file=sys.stderr)
    return import_llama(folder, text, gemma_config, lambda tensors, cfg: gains_as_one_plus(_text_part(tensors), cfg))


def _text_part(tensors: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
    """A multimodal Gemma 3's language-model tensors under Gemma3ForCausalLM's names (``language_model.model.*``
    before transformers 4.52, ``model.language_model.*`` since); its vision tower's dropped."""
    for name, tensor in tensors:
        bare = name.removeprefix("model.")
        if bare.startswith(VISION):
            continue
        if bare.startswith("language_model."):
            name = "model." + bare.removeprefix("language_model.").removeprefix("model.")
            name = name.replace("model.lm_head.", "lm_head.")
        yield name, tensor


def gemma_problems(cfg: ModelConfig) -> list[str]:
    """What a ``Gemma3ForCausalLM`` cannot express of ``cfg`` (empty: it exports)."""
    return _problems(cfg) + [problem for ok, problem in [
        (cfg.qk_norm, "no qk_norm"), (cfg.query_scale is None and cfg.attention_softcap is None and cfg.logit_softcap
                                      is None, "Gemma 2's query scale and soft-capping")] if not ok]


def gemma2_problems(cfg: ModelConfig) -> list[str]:
    """What a ``Gemma2ForCausalLM`` cannot express of ``cfg`` (empty: it exports)."""
    return _problems(cfg) + [problem for ok, problem in [
        (not cfg.qk_norm, "qk_norm (Gemma 3's)"), (cfg.rope_scaling is None, "rope_scaling"),
        (cfg.local_position_base in (None, cfg.position_base), "a rotary base of the sliding layers' own"),
        (float(cfg.query_scale or 1).is_integer(), "a query scale that is not a whole number")] if not ok]


def _problems(cfg: ModelConfig) -> list[str]:
    """What neither Gemma 2 nor Gemma 3 can express of ``cfg``."""
    checks = [(cfg.arch == "decoder-only", f"arch {cfg.arch}"), (cfg.norm == "sandwich", f"norm {cfg.norm}"),
              (cfg.norm_type == "rmsnorm", "norm_type layernorm"), (cfg.feed_forward == "swiglu", "feed_forward"),
              (cfg.activation == "gelu_tanh", f"activation {cfg.activation}"),
              (cfg.positions == "rope", f"positions {cfg.positions}"), (cfg.scale_embeddings, "unscaled embeddings"),
              (cfg.qkv_bias == cfg.out_bias and not cfg.ffn_bias and not cfg.output_bias, "biases"),
              (cfg.rope_scaling is None or cfg.rope_scaling["type"] == "linear", "rope_scaling"),
              (cfg.scale_attention and not cfg.embedding_norm and not cfg.output_transform, "the paper's options"),
              (cfg.rotary_dim is None, "rotary_dim (partial rotary positions)"),
              (not cfg.n_experts, "n_experts")]
    return [problem for ok, problem in checks if not ok]


def gemma_hf_config(cfg: ModelConfig, vocab: int) -> dict:
    """The ``Gemma3TextConfig`` fields of a Gemma-shaped aiayn config (``vocab``: the real rows)."""
    full = {"rope_type": "default", "rope_theta": cfg.position_base}
    if cfg.rope_scaling is not None:
        full = {"rope_type": "linear", "factor": cfg.rope_scaling["factor"], "rope_theta": cfg.position_base}
    local = {"rope_type": "default", "rope_theta": cfg.local_position_base or cfg.position_base}
    kinds = {v: k for k, v in LAYER_TYPES.items()}
    return dict(vocab_size=vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                num_hidden_layers=cfg.n_decoder_layers, num_attention_heads=cfg.n_heads,
                num_key_value_heads=cfg.kv_heads, head_dim=cfg.d_head, query_pre_attn_scalar=cfg.d_head,
                hidden_activation="gelu_pytorch_tanh", max_position_embeddings=cfg.max_len,
                rms_norm_eps=cfg.layer_norm_eps, attention_bias=cfg.qkv_bias,
                rope_parameters={"full_attention": full, "sliding_attention": local},
                sliding_window=cfg.sliding_window or cfg.max_len,
                layer_types=[kinds[t] for t in (cfg.layer_types or ("full",) * cfg.n_decoder_layers)],
                tie_word_embeddings=cfg.share_embeddings != "none", pad_token_id=cfg.pad_id if cfg.pad_id < vocab
                else None, bos_token_id=cfg.bos_id, eos_token_id=list(cfg.end_ids) if cfg.stop_ids else cfg.eos_id)


def gemma2_hf_config(cfg: ModelConfig, vocab: int) -> dict:
    """The ``Gemma2Config`` fields of a Gemma 2-shaped aiayn config: Gemma 3's, with one rotary base, the query
    scale and the soft-caps."""
    fields = {k: v for k, v in gemma_hf_config(cfg, vocab).items() if k != "rope_parameters"}
    return dict(fields, rope_parameters={"rope_type": "default", "rope_theta": cfg.position_base},
                query_pre_attn_scalar=int(cfg.query_scale or cfg.d_head), attn_logit_softcapping=cfg.attention_softcap,
                final_logit_softcapping=cfg.logit_softcap)


def export_gemma(model: DecoderOnly, vocab: int, folder: Path) -> None:
    """Save ``model`` as a Hugging Face ``Gemma3ForCausalLM`` (without q/k norms: ``Gemma2ForCausalLM``) folder in
    ``folder``: the LLaMA branch's tensors (``llama_tensors``), each norm's gain g written as Gemma's g - 1."""
    import transformers

    from aiayn.formats.llama import llama_tensors

    if model.config.qk_norm:
        hf = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**gemma_hf_config(model.config, vocab)))
    else:
        hf = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**gemma2_hf_config(model.config, vocab)))
    tensors = {k: (v - 1.0 if k.endswith("norm.weight") else v) for k, v in llama_tensors(model, vocab).items()}
    hf.eval().load_state_dict(tensors, strict=True)
    hf.save_pretrained(folder)
