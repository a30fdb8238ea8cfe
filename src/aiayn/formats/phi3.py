"""Phi-3 and Phi-4-mini (``Phi3ForCausalLM``, model_type ``phi3``) -> aiayn's decoder-only model: the LLaMA branch
(``formats/llama.py``) with Phi's fused projections, read apart (``qkv_proj`` into q, k, v; ``gate_up_proj`` into
gate and up: aiayn fuses them again for inference), and partial rotary positions (``partial_rotary_factor``:
``rotary_dim``). LongRoPE (the 128k models' ``longrope``/``su`` short and long factors) is refused by name.
Exported back as ``Phi3ForCausalLM`` (the projections fused again) when the model has partial rotary positions
(without, it is a Llama: ``formats/llama.py`` writes it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats.llama import import_llama, llama_config, llama_hf_config, llama_problems, llama_tensors
from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("phi3",)


def phi3_config(hf: dict, unk_id: int | None) -> ModelConfig:
    """aiayn's config for a Phi-3 ``config.json`` (as a dict); ``unk_id``: the tokenizer's."""
    rope = dict(hf.get("rope_parameters") or {})
    kind = rope.get("rope_type") or (hf.get("rope_scaling") or {}).get("type") or "default"
    if kind in ("longrope", "su", "yarn"):
        raise ValueError(f"config.json: rope scaling {kind!r} (Phi-3's long-context LongRoPE) is not supported; the "
                         "4k-context models have none")
    factor = float(rope.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
    plain = {**{k: v for k, v in hf.items() if k != "partial_rotary_factor"}, "rope_parameters": rope or None,
             "model_type": "llama"}
    cfg = llama_config(plain, unk_id)
    return cfg if factor == 1.0 else cfg.replace(rotary_dim=int(cfg.d_head * factor))


def split_fused(tensors: Iterable[tuple[str, Tensor]], cfg: ModelConfig) -> Iterator[tuple[str, Tensor]]:
    """Phi's fused projections as LLaMA's: ``qkv_proj`` rows [q; k; v] and ``gate_up_proj`` rows [gate; up]."""
    q, kv = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
    for name, tensor in tensors:
        if name.endswith("self_attn.qkv_proj.weight"):
            for part, rows in zip("qkv", tensor.split([q, kv, kv]), strict=True):
                yield name.replace("qkv_proj", f"{part}_proj"), rows
        elif name.endswith("mlp.gate_up_proj.weight"):
            gate, up = tensor.chunk(2)
            yield name.replace("gate_up_proj", "gate_proj"), gate
            yield name.replace("gate_up_proj", "up_proj"), up
        else:
            yield name, tensor


def import_phi3(folder: Path, hf: dict) -> tuple[DecoderOnly, HFTokenizers]:
    return import_llama(folder, hf, phi3_config, split_fused)


def phi3_problems(cfg: ModelConfig) -> list[str]:
    """What a ``Phi3ForCausalLM`` cannot express of ``cfg`` (empty: it exports)."""
    found = [p for p in llama_problems(cfg) if not p.startswith("rotary_dim")]
    checks = [(not cfg.qk_norm and not cfg.n_experts, "q/k norms or experts"),
              (not (cfg.qkv_bias or cfg.out_bias or cfg.ffn_bias), "biases"),
              (cfg.rope_layout == "halves" or cfg.rotary_dim is None, "partial rotary positions in interleaved pairs"),
              (cfg.rope_scaling is None, "rope_scaling")]
    return found + [problem for ok, problem in checks if not ok]


def export_phi3(model: DecoderOnly, vocab: int, folder: Path) -> None:
    """Save ``model`` as a Hugging Face ``Phi3ForCausalLM`` folder: q, k, v fused as ``qkv_proj``, gate and up as
    ``gate_up_proj``."""
    import transformers

    cfg = model.config
    fields = {k: v for k, v in llama_hf_config(cfg, vocab).items() if k not in ("attention_bias", "mlp_bias")}
    fields["rope_parameters"]["partial_rotary_factor"] = (cfg.rotary_dim or cfg.d_head) / cfg.d_head
    hf = transformers.Phi3ForCausalLM(transformers.Phi3Config(**fields, sliding_window=cfg.sliding_window)).eval()
    hf.load_state_dict(phi3_tensors(model, vocab), strict=True)
    hf.save_pretrained(folder)


def phi3_tensors(model: DecoderOnly, vocab: int) -> dict[str, Tensor]:
    """Hugging Face name -> tensor of a Phi-3-shaped model: the LLaMA branch's (``llama_tensors``) with q, k, v
    fused as ``qkv_proj`` and gate, up as ``gate_up_proj`` (``split_fused`` backwards)."""
    tensors = llama_tensors(model, vocab)
    for i in range(model.config.n_decoder_layers):
        attn, mlp = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        tensors[f"{attn}.qkv_proj.weight"] = torch.cat([tensors.pop(f"{attn}.{p}_proj.weight") for p in "qkv"])
        tensors[f"{mlp}.gate_up_proj.weight"] = torch.cat([tensors.pop(f"{mlp}.{p}_proj.weight")
                                                           for p in ("gate", "up")])
    return tensors
