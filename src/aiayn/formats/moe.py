"""Mixtures of experts (``MixtralForCausalLM``, ``Qwen3MoeForCausalLM``) -> aiayn's decoder-only model: the LLaMA
branch (``formats/llama.py``; Qwen3-MoE with Qwen3's q/k norms) with ``n_experts`` SwiGLU experts in place of each
feed-forward network (``model/experts.py``). A checkpoint keeps each expert's matrices apart
(``experts.J.gate_proj`` or Mixtral's ``w1``/``w3``/``w2``); they are read layer by layer and stacked into the
model's batched ``gate_up`` (E, 2F, D) and ``down`` (E, D, F).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats.llama import import_llama, llama_config
from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.tokenizers.hf import HFTokenizers

MODEL_TYPES = ("mixtral", "qwen3_moe")
EXPERT = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight")
PARTS = {"w1": "gate", "gate_proj": "gate", "w3": "up", "up_proj": "up", "w2": "down", "down_proj": "down"}


def moe_config(hf: dict, unk_id: int | None) -> ModelConfig:
    """aiayn's config for a Mixtral or Qwen3-MoE ``config.json`` (as a dict); ``unk_id``: the tokenizer's."""
    qwen = hf["model_type"] == "qwen3_moe"
    if qwen and (hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers")):
        raise ValueError("config.json: decoder_sparse_step / mlp_only_layers (dense layers among the experts) are "
                         "not supported")
    cfg = llama_config({**hf, "model_type": "qwen3" if qwen else "mistral"}, unk_id)
    experts = hf.get("num_experts") or hf["num_local_experts"]  # Qwen3-MoE's name, transformers 5's for both
    return cfg.replace(n_experts=experts, experts_per_token=hf["num_experts_per_tok"],
                       expert_d_ff=hf.get("moe_intermediate_size") if qwen else None,
                       renorm_experts=bool(hf.get("norm_topk_prob", False)) if qwen else True)


def stacked_experts(tensors: Iterable[tuple[str, Tensor]], cfg: ModelConfig) -> Iterator[tuple[str, Tensor]]:
    """The checkpoint's tensors with each layer's experts stacked (``mlp.experts.gate_up_proj`` (E, 2F, D),
    ``mlp.experts.down_proj`` (E, D, F)) once all of them are read, Mixtral's router named ``mlp.gate``."""
    held: dict[int, dict[tuple[int, str], Tensor]] = {}
    for name, tensor in tensors:
        found = EXPERT.fullmatch(name)
        if found is None:
            yield name.replace("block_sparse_moe.gate.", "mlp.gate."), tensor
            continue
        layer, expert, part = int(found[1]), int(found[2]), PARTS.get(found[3])
        if part is None or expert >= cfg.n_experts:
            raise ValueError(f"weights: tensor {name} has no place in aiayn's model")
        parts = held.setdefault(layer, {})
        parts[expert, part] = tensor
        if len(parts) == 3 * cfg.n_experts:
            del held[layer]
            yield from _stack(layer, parts, cfg.n_experts)
    if held:
        raise ValueError(f"weights: layer {min(held)} lacks some experts' matrices")


def _stack(layer: int, parts: dict[tuple[int, str], Tensor], n: int) -> Iterator[tuple[str, Tensor]]:
    prefix = f"model.layers.{layer}.mlp.experts"
    yield f"{prefix}.gate_up_proj", torch.stack([torch.cat([parts[e, "gate"], parts[e, "up"]]) for e in range(n)])
    yield f"{prefix}.down_proj", torch.stack([parts[e, "down"] for e in range(n)])


def import_moe(folder: Path, hf: dict) -> tuple[DecoderOnly, HFTokenizers]:
    return import_llama(folder, hf, moe_config, stacked_experts)
