"""The conditional masked language model of Mask-Predict (Ghazvininejad et al., 2019): the Transformer's
encoder-decoder whose decoder attends over the whole target (no causal mask), plus a length predictor. The class
lives beside the other family members and the CTC model (``model/transformer.py``, which builds it for
``config.cmlm``); here are the helpers decoding uses.

Training replaces some target tokens by ``<mask>`` and predicts them from the source and the other target
tokens (``aiayn.training.tasks.CMLMTask``); decoding predicts every position at once and refines the least
sure ones (``aiayn.decoding.mask_predict``). Masks are bool, True = may attend.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model.transformer import CMLM

__all__ = ["CMLM", "predicted_lengths"]


@torch.no_grad()
def predicted_lengths(model: CMLM, memory: Tensor, src_mask: Tensor | None, beam: int) -> Tensor:
    """(B, beam) the ``beam`` likeliest target lengths (at least 1), likeliest first."""
    scores = model.length_logits(memory, src_mask)  # (B, max_len + 1)
    scores[:, 0] = float("-inf")  # a translation has at least one token
    return scores.topk(min(beam, scores.size(1) - 1), dim=-1).indices
