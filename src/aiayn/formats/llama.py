"""Llama, Qwen2, Qwen3 and Mistral (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``,
``MistralForCausalLM``) <-> aiayn's decoder-only model with the LLaMA options: pre-norm with RMSNorm, SwiGLU,
rotary positions in the halves layout (Hugging Face's ``rotate_half``) with ``rope_theta`` and a scaling rule,
grouped-query attention, no biases but Qwen2's on q/k/v, Qwen3's q/k norms (``qk_norm``), Mistral's sliding
window, unscaled embeddings, the output tied or not.

The checkpoints have no padding token of their own (or reuse a real one), so aiayn appends one zero row for
padding (``pad_id`` = the config's vocab_size; never generated: the logits of the real vocabulary are the
checkpoint's). One table of tensor names serves import and export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats.gguf_rows import ZeroRows
from aiayn.formats.hf_folder import iter_weights
from aiayn.io.rows import StackedRows, defer_rows
from aiayn.model.checks import ROPE_SCALING
from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
LAYER_PARTS = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
               "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
               "mlp.gate_proj": "ffn.gate_proj", "mlp.up_proj": "ffn.up_proj", "mlp.down_proj": "ffn.down_proj",
               "input_layernorm": "res_self.norm", "post_attention_layernorm": "res_ffn.norm"}
QK_NORMS = {"self_attn.q_norm": "self_attn.q_norm", "self_attn.k_norm": "self_attn.k_norm"}  # Qwen3's, Gemma 3's
SANDWICH = {"input_layernorm": "res_self.norm", "post_attention_layernorm": "res_self.post_norm",  # Gemma 2 and 3
            "pre_feedforward_layernorm": "res_ffn.norm", "post_feedforward_layernorm": "res_ffn.post_norm"}
IGNORED = ("rotary_emb.inv_freq",)  # buffers older transformers saved; recomputed from the config


def _rope(hf: dict) -> tuple[float, dict | None]:
    """``rope_theta`` and aiayn's ``rope_scaling`` from either form (``rope_parameters`` of transformers 5,
    ``rope_theta`` + ``rope_scaling`` before); a rule aiayn does not have is refused by name."""
    params = hf.get("rope_parameters") or {}
    legacy = hf.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    source = params if params.get("rope_type", "default") != "default" else legacy
    kind = source.get("rope_type") or source.get("type") or "default"
    if float(source.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))) != 1.0:
        raise ValueError("config.json: partial_rotary_factor (rotary positions on part of each head) is not supported")
    if kind == "default":
        return theta, None
    if kind not in ROPE_SCALING:
        raise ValueError(f"config.json: rope scaling {kind!r} is not supported; aiayn has {', '.join(ROPE_SCALING)}")
    source = {"original_max_position_embeddings": hf.get("max_position_embeddings"), **source}
    missing = [key for key in ROPE_SCALING[kind] if source.get(key) is None]
    if missing:
        raise ValueError(f"config.json: rope scaling {kind} needs {', '.join(missing)}")
    return theta, {"type": kind, **{key: source[key] for key in ROPE_SCALING[kind]}}


def _window(hf: dict) -> int | None:
    """Mistral's sliding window; Qwen2's and Qwen3's per-layer windows (``use_sliding_window``) are refused."""
    if hf["model_type"] in ("qwen2", "qwen3"):
        if hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or []):
            raise ValueError(f"config.json: {hf['model_type']}'s use_sliding_window (windows on some layers) is not "
                             "supported")
        return None
    if "sliding_attention" in (hf.get("layer_types") or []) and "full_attention" in hf["layer_types"]:
        raise ValueError("config.json: layer_types mixing sliding and full attention is not supported")
    return hf.get("sliding_window")


def _first(value):
    return value[0] if isinstance(value, list) and value else value


def llama_config(hf: dict, unk_id: int | None) -> ModelConfig:
    """aiayn's config for a Llama / Qwen2 / Mistral ``config.json`` (as a dict); ``unk_id``: the tokenizer's."""
    if hf.get("hidden_act", "silu") not in ACTIVATIONS:
        raise ValueError(f"config.json: hidden_act {hf.get('hidden_act')!r} is not supported; aiayn has "
                         f"{', '.join(ACTIVATIONS)}")
    theta, scaling = _rope(hf)
    vocab, heads = hf["vocab_size"], hf["num_attention_heads"]
    pad = vocab  # the appended padding row
    ends = hf.get("eos_token_id")
    ends = list(dict.fromkeys(ends)) if isinstance(ends, list) else [ends]  # Llama 3: several; the first is EOS
    eos = ends[0] if ends else None
    if eos is None:
        raise ValueError("config.json: no eos_token_id; aiayn needs the end-of-sequence id to stop generating")
    bos = hf.get("bos_token_id")
    head_dim = hf.get("head_dim")
    attention_bias = bool(hf.get("attention_bias", False))
    qwen2, qwen3 = hf["model_type"] == "qwen2", hf["model_type"] == "qwen3"
    return ModelConfig(
        arch="decoder-only", vocab_size=vocab + 1, d_model=hf["hidden_size"], n_heads=heads,
        n_encoder_layers=0, n_decoder_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"],
        dropout=0.0, attention_dropout=float(hf.get("attention_dropout", 0.0)),
        activation=ACTIVATIONS[hf.get("hidden_act", "silu")], norm="pre", norm_type="rmsnorm",
        feed_forward="swiglu", n_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=None if head_dim in (None, hf["hidden_size"] // heads) else head_dim,
        positions="rope", position_base=theta, rope_layout="halves", rope_scaling=scaling,
        qkv_bias=qwen2 or attention_bias, out_bias=attention_bias, ffn_bias=bool(hf.get("mlp_bias", False)),
        qk_norm=qwen3,
        sliding_window=_window(hf), share_embeddings="all" if hf.get("tie_word_embeddings", False) else "none",
        max_len=hf.get("max_position_embeddings", 2048), layer_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        scale_embeddings=False, pad_id=pad, bos_id=pad if bos is None else _first(bos), eos_id=eos,
        unk_id=pad if unk_id is None else unk_id, mask_id=pad, padding_row=True, stop_ids=tuple(ends[1:]))


def tensor_names(cfg: ModelConfig) -> dict[str, str]:
    """Hugging Face name -> aiayn name of every tensor (biases where the config has them)."""
    names = {"model.embed_tokens.weight": "embed.tokens.weight", "model.norm.weight": "decoder.norm.weight"}
    if cfg.share_embeddings == "none":
        names["lm_head.weight"] = "output.weight"
    biased = {"q_proj": cfg.qkv_bias, "k_proj": cfg.qkv_bias, "v_proj": cfg.qkv_bias, "o_proj": cfg.out_bias,
              "gate_proj": cfg.ffn_bias, "up_proj": cfg.ffn_bias, "down_proj": cfg.ffn_bias}
    parts = {**LAYER_PARTS, **(QK_NORMS if cfg.qk_norm else {})}
    if cfg.n_experts:  # the router; the experts' stacked tensors are named below (formats/moe.py stacks them)
        parts = {**{k: v for k, v in parts.items() if not k.startswith("mlp.")}, "mlp.gate": "ffn.router"}
    if cfg.norm == "sandwich":
        parts = {**{k: v for k, v in parts.items() if not k.endswith("layernorm")}, **SANDWICH}
    for i in range(cfg.n_decoder_layers):
        for theirs, mine in parts.items():
            names[f"model.layers.{i}.{theirs}.weight"] = f"decoder.layers.{i}.{mine}.weight"
            if biased.get(theirs.split(".")[-1]):
                names[f"model.layers.{i}.{theirs}.bias"] = f"decoder.layers.{i}.{mine}.bias"
        if cfg.n_experts:
            for part in ("gate_up", "down"):
                names[f"model.layers.{i}.mlp.experts.{part}_proj"] = f"decoder.layers.{i}.ffn.{part}"
    return names


def load_llama_weights(model: DecoderOnly, tensors: Iterable[tuple[str, Tensor]], source: str = "config.json") -> None:
    """Copy ``tensors`` ((Hugging Face name, tensor) pairs, e.g. a folder's shard by shard) into ``model`` one at
    a time; every parameter must be given, shapes must agree (``source`` names what set them), and a tensor
    aiayn has no place for is an error naming it."""
    names = tensor_names(model.config)
    params = dict(model.named_parameters(remove_duplicate=False))
    filled: set[str] = set()
    with torch.no_grad():
        for theirs, tensor in tensors:
            if theirs not in names:
                if theirs.endswith(IGNORED):
                    continue
                raise ValueError(f"weights: tensor {theirs} has no place in aiayn's model (the config does not say "
                                 "it exists)")
            target = params[names[theirs]]
            table = names[theirs] in ("embed.tokens.weight", "output.weight")
            rows = target[:-1] if table and model.config.padding_row else target
            if tuple(rows.shape) != tuple(tensor.shape):
                raise ValueError(f"weights: tensor {theirs} has shape {tuple(tensor.shape)}, {source} says "
                                 f"{tuple(rows.shape)}")
            if isinstance(tensor, Tensor):
                rows.copy_(tensor)
            else:  # rows read a slice at a time (a GGUF file's: formats/gguf_rows.py), left for the converter
                padding = rows.size(0) < target.size(0)  # (and the padding row under them)
                defer_rows(target, StackedRows([tensor, ZeroRows(1, target.size(1))]) if padding else tensor)
            filled.add(names[theirs])
        missing = sorted(set(names.values()) - filled)
        if missing:
            raise ValueError(f"weights: nothing for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if model.config.padding_row:
            model.embed.tokens.weight[-1].zero_()  # the padding row
            model.output.weight[-1].zero_()


def import_llama(folder: Path, hf: dict, config: Callable[[dict, int | None], ModelConfig] | None = None,
                 weights: Callable[[Iterable, ModelConfig], Iterable] | None = None
                 ) -> tuple[DecoderOnly, HFTokenizers]:
    """The model and tokenizers of a folder of the LLaMA branch: ``config`` makes its config (default Llama's; a
    member's: ``gemma_config``, ``phi3_config``, ``moe_config``), ``weights`` (tensors, config) -> tensors is what
    the checkpoint's tensors go through first (Gemma's gains, Phi's fused projections split, experts stacked)."""
    tokenizers = HFTokenizers.load(folder)
    if len(tokenizers.src) > hf["vocab_size"]:
        raise ValueError(f"{folder / 'tokenizer.json'}: {len(tokenizers.src)} tokens, more than config.json's "
                         f"vocab_size {hf['vocab_size']}")
    model = DecoderOnly((config or llama_config)(hf, tokenizers.src.unk_id()))
    tensors = iter_weights(folder)
    load_llama_weights(model, tensors if weights is None else weights(tensors, model.config))
    return model.eval(), tokenizers


def llama_problems(cfg: ModelConfig) -> list[str]:
    """What a ``LlamaForCausalLM`` (or Qwen2's, Mistral's) cannot express of ``cfg`` (empty: it exports)."""
    checks = [(cfg.arch == "decoder-only", f"arch {cfg.arch}"), (cfg.norm == "pre", "norm post"),
              (cfg.norm_type == "rmsnorm", "norm_type layernorm"),
              (cfg.feed_forward == "swiglu", "feed_forward standard"),
              (cfg.positions == "rope", f"positions {cfg.positions}"), (not cfg.scale_embeddings, "scale_embeddings"),
              (not cfg.ffn_bias or cfg.qkv_bias == cfg.out_bias, "ffn_bias with Qwen2's attention biases"),
              (cfg.sliding_window is None or not (cfg.qkv_bias or cfg.ffn_bias), "sliding_window with biases"),
              (not cfg.output_bias, "output_bias"), (cfg.activation in HF_ACTIVATIONS, f"activation {cfg.activation}"),
              (not cfg.embedding_norm and not cfg.output_transform, "embedding_norm / output_transform"),
              (cfg.scale_attention, "scale_attention false (unscaled dot products)"),
              (not cfg.qk_norm or cfg.qkv_bias == cfg.out_bias, "qk_norm with Qwen2's attention biases"),
              (not cfg.qk_norm or cfg.sliding_window is None, "qk_norm with a sliding window"),
              (cfg.rotary_dim is None, "rotary_dim (partial rotary positions)"),
              (not cfg.n_experts or cfg.qk_norm or cfg.renorm_experts,
               "n_experts without renormalised weights and q/k norms (Mixtral renormalises)"),
              (cfg.query_scale is None and cfg.attention_softcap is None and cfg.logit_softcap is None,
               "query_scale / soft-capping (Gemma 2)"),
              (cfg.rope_scaling is None or cfg.rope_scaling["type"] != "factors",
               "rope_scaling factors (a GGUF file's rope_freqs; export it as GGUF)")]
    return [problem for ok, problem in checks if not ok]


def hf_model_type(cfg: ModelConfig) -> str:
    """Which of Llama, Qwen2 (q/k/v biases alone), Qwen3 (q/k norms), Mistral (a sliding window), Mixtral and
    Qwen3-MoE (experts, without and with q/k norms) has this shape."""
    if cfg.n_experts:
        return "qwen3_moe" if cfg.qk_norm else "mixtral"
    if cfg.qk_norm:
        return "qwen3"
    if cfg.sliding_window is not None:
        return "mistral"
    return "qwen2" if cfg.qkv_bias and not cfg.out_bias else "llama"


def llama_hf_config(cfg: ModelConfig, vocab: int) -> dict:
    """The ``LlamaConfig`` (``Qwen2Config``, ``MistralConfig``) fields of a Llama-shaped aiayn config
    (``vocab``: the real rows, without an appended padding row)."""
    rope = {"rope_type": "default"} if cfg.rope_scaling is None else {
        "rope_type": cfg.rope_scaling["type"], **{k: v for k, v in cfg.rope_scaling.items() if k != "type"}}
    kind = hf_model_type(cfg)
    ends = list(cfg.end_ids) if cfg.stop_ids else cfg.eos_id
    fields = dict(vocab_size=vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                  num_hidden_layers=cfg.n_decoder_layers, num_attention_heads=cfg.n_heads,
                  num_key_value_heads=cfg.kv_heads, head_dim=cfg.d_head, hidden_act=HF_ACTIVATIONS[cfg.activation],
                  max_position_embeddings=cfg.max_len, rms_norm_eps=cfg.layer_norm_eps,
                  rope_parameters={**rope, "rope_theta": cfg.position_base},
                  tie_word_embeddings=cfg.share_embeddings != "none", bos_token_id=cfg.bos_id,
                  eos_token_id=ends, pad_token_id=cfg.pad_id if cfg.pad_id < vocab else None)
    if kind == "llama":
        fields.update(attention_bias=cfg.qkv_bias, mlp_bias=cfg.ffn_bias)
    if kind == "qwen3":
        fields.update(attention_bias=cfg.qkv_bias, use_sliding_window=False)
    if kind in ("mistral", "mixtral"):
        fields.update(sliding_window=cfg.sliding_window)
    if kind == "mixtral":
        fields.update(num_local_experts=cfg.n_experts, num_experts_per_tok=cfg.experts_per_token,
                      intermediate_size=cfg.expert_d_ff or cfg.d_ff)
    if kind == "qwen3_moe":
        fields.update(attention_bias=cfg.qkv_bias, use_sliding_window=False, num_experts=cfg.n_experts,
                      num_experts_per_tok=cfg.experts_per_token, moe_intermediate_size=cfg.expert_d_ff or cfg.d_ff,
                      norm_topk_prob=cfg.renorm_experts, decoder_sparse_step=1, mlp_only_layers=[])
    return fields


HF_ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}
HF_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
              "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
              "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
              "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM")}


def llama_tensors(model: DecoderOnly, vocab: int) -> dict[str, Tensor]:
    """Hugging Face name -> tensor of a Llama-shaped model (the first ``vocab`` rows of the tables);
    interleaved rotary pairs are permuted into the halves layout, which changes no output."""
    own = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {theirs: own[ours] for theirs, ours in tensor_names(model.config).items()}
    out["model.embed_tokens.weight"] = own["embed.tokens.weight"][:vocab]
    out["lm_head.weight"] = own["output.weight"][:vocab]  # the same tensor when tied
    if model.config.rope_layout == "interleaved":
        _to_halves(out, model.config)
    return {k: v.contiguous() for k, v in out.items()}


def _to_halves(tensors: dict[str, Tensor], cfg: ModelConfig) -> None:
    """Reorder each head's q and k rows from pairs (2i, 2i+1) to (i, i + D/2): the same rotation (the q/k norms'
    gains too, which scale those rows)."""
    d = cfg.d_head
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # (D,)
    for name in [n for n in tensors if any(part in n for part in (".q_proj.", ".k_proj.", ".q_norm.", ".k_norm."))]:
        t = tensors[name]
        tensors[name] = t.reshape(t.size(0) // d, d, *t.shape[1:])[:, order].reshape(t.shape)  # (H*D, ...)


def export_llama(model: DecoderOnly, vocab: int, folder: Path) -> None:
    """Save ``model`` as a Hugging Face ``LlamaForCausalLM`` (Qwen2, Qwen3, Mistral, Mixtral, Qwen3-MoE) folder in
    ``folder``."""
    import transformers

    config_class, model_class = (getattr(transformers, name) for name in HF_CLASSES[hf_model_type(model.config)])
    hf = model_class(config_class(**llama_hf_config(model.config, vocab))).eval()
    hf.load_state_dict(llama_tensors(model, vocab), strict=True)
    hf.save_pretrained(folder)
