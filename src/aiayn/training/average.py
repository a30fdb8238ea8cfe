"""Checkpoint averaging (section 6.1: the base model averages the last 5 checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from aiayn.decoding.config import DecodingConfig
from aiayn.interop.peft import read_adapter_config
from aiayn.io.checkpoint import ADAPTER_CONFIG, ADAPTER_WEIGHTS, CHECKSUMS, digests, write_checkpoint
from aiayn.io.files import atomic_directory, atomic_write_text, claim_output
from aiayn.model.build import load_model
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import load_tokenizers


def average_checkpoints(folders: list[Path], output: Path, overwrite: bool = False) -> TransformerModel:
    """Average the weights of ``folders`` (same config) and write a checkpoint folder to ``output``."""
    claim_output(output, "average", overwrite=overwrite, own_files=(CHECKSUMS,))  # before any loading
    if not folders:
        raise FileNotFoundError("no checkpoints to average (is keep_last > 0 in the recipe?)")
    if any((f / ADAPTER_CONFIG).is_file() for f in folders):
        return average_adapters(folders, output, overwrite)
    models = [load_model(f) for f in folders]
    configs = {m.config for m in models}
    if len(configs) != 1:
        raise ValueError(f"checkpoints {', '.join(map(str, folders))} have different configs; cannot average")
    merged = models[0]
    with torch.no_grad():
        for name, param in merged.named_parameters():
            stacked = torch.stack([dict(m.named_parameters())[name] for m in models])  # (K, ...)
            param.copy_(stacked.mean(dim=0))
    generation = DecodingConfig.load(folders[-1]).changes() or None  # the run's decoding defaults go along
    write_checkpoint(output, merged, load_tokenizers(folders[-1]), generation=generation, by="average",
                     overwrite=overwrite)
    return merged


def average_adapters(folders: list[Path], output: Path, overwrite: bool = False) -> None:
    """Average LoRA adapter folders (a LoRA run's step checkpoints) into one adapter folder: A with A, B with B,
    as averaging treats every trained parameter. (The mean of the updates B A is no rank-r adapter.)"""
    from safetensors.torch import load_file, save_file

    configs = [read_adapter_config(f) for f in folders]  # each one a LoRA adapter folder, or a one-line error
    keys = ("r", "lora_alpha", "target_modules", "base_model_name_or_path")
    if any({k: c.get(k) for k in keys} != {k: configs[0].get(k) for k in keys} for c in configs):
        raise ValueError(f"adapters {', '.join(map(str, folders))} differ in {', '.join(keys)}; cannot average")
    tensors = [load_file(str(f / ADAPTER_WEIGHTS)) for f in folders]
    if any(t.keys() != tensors[0].keys() for t in tensors):
        raise ValueError(f"adapters {', '.join(map(str, folders))} adapt different modules; cannot average")
    mean = {name: torch.stack([t[name] for t in tensors]).mean(dim=0) for name in tensors[0]}  # (K, ...) -> mean
    with atomic_directory(output, "average", overwrite=overwrite, own_files=(CHECKSUMS,)) as tmp:
        atomic_write_text(tmp / ADAPTER_CONFIG, json.dumps(configs[-1], indent=2) + "\n")
        save_file(mean, str(tmp / ADAPTER_WEIGHTS))
        atomic_write_text(tmp / CHECKSUMS, json.dumps(digests(tmp), indent=1) + "\n")
