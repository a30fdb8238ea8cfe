"""Phi-3 and Phi-4-mini (``Phi3ForCausalLM``, model_type ``phi3``) -> aiayn's decoder-only model: the LLaMA branch
(``interop/llama.py``) with Phi's fused projections, read apart (``qkv_proj`` into q, k, v; ``gate_up_proj`` into
gate and up: aiayn fuses them again for inference), and partial rotary positions (``partial_rotary_factor``:
``rotary_dim``). LongRoPE (the 128k models' ``longrope``/``su`` short and long factors) is refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from torch import Tensor

from aiayn.interop.llama import import_llama, llama_config
from aiayn.model.config import ModelConfig
from aiayn.model.transformer import DecoderOnly
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
