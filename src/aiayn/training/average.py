"""Checkpoint averaging (section 6.1: the base model averages the last 5 checkpoints)."""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.decoding.config import DecodingConfig
from aiayn.io.checkpoint import CHECKSUMS, write_checkpoint
from aiayn.io.files import claim_output
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import load_tokenizers


def average_checkpoints(folders: list[Path], output: Path, overwrite: bool = False) -> TransformerModel:
    """Average the weights of ``folders`` (same config) and write a checkpoint folder to ``output``."""
    claim_output(output, "average", overwrite=overwrite, own_files=(CHECKSUMS,))  # before any loading
    if not folders:
        raise FileNotFoundError("no checkpoints to average (is keep_last > 0 in the recipe?)")
    models = [TransformerModel.load(f) for f in folders]
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
