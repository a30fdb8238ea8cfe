"""Loss, optimiser and learning-rate schedule of section 5.3-5.4."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """Equation (3): lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_optimizer(model: nn.Module, lr: float = 1.0) -> torch.optim.Adam:
    """Adam with beta1 0.9, beta2 0.98, eps 1e-9 (section 5.3)."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def seq2seq_loss(logits: Tensor, labels: Tensor, pad_id: int, label_smoothing: float = 0.0) -> Tensor:
    """Mean label-smoothed cross-entropy over the non-pad labels (section 5.4).

    logits (B, T, V), labels (B, T) -> scalar; PAD labels are ignored.
    """
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=pad_id,
                           label_smoothing=label_smoothing)


def shift_target(tgt: Tensor, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
    """Teacher forcing: ``<s> y1 .. yn </s>`` (B, T+1) -> decoder input ``<s> y1 .. yn`` and labels
    ``y1 .. yn </s>``, both (B, T). The input's EOS (of the longest rows) becomes PAD."""
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == eos_id, pad_id)  # (B, T)
    return tgt_in, tgt[:, 1:]
