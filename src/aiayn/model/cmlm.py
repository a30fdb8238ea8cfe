"""The conditional masked language model of Mask-Predict (Ghazvininejad et al., 2019): the Transformer's
encoder-decoder whose decoder attends over the whole target (no causal mask), plus a length predictor.

Training replaces some target tokens by ``<mask>`` and predicts them from the source and the other target
tokens (``aiayn.training.tasks.CMLMTask``); decoding predicts every position at once and refines the least
sure ones (``aiayn.decoding.mask_predict``). Masks are bool, True = may attend.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.model.config import ModelConfig
from aiayn.model.masks import key_mask, padding_mask
from aiayn.model.transformer import EncoderDecoder


class CMLM(EncoderDecoder):
    """``forward(src_ids (B, S), tgt_ids (B, T)) -> logits (B, T, V)`` at every target position, each seeing
    all non-pad target tokens (``<mask>`` included); with ``with_length`` also the length logits (B, max_len + 1).

    The length predictor is a classifier over the mean of the encoder output (real source tokens only): one
    class per target length 0..max_len.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.length_head = nn.Linear(config.d_model, config.max_len + 1)
        nn.init.xavier_uniform_(self.length_head.weight)
        nn.init.zeros_(self.length_head.bias)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor, with_length: bool = False):
        src_mask = padding_mask(src_ids, self.config.pad_id)  # (B, S), True = real token
        memory = self.encode(src_ids)
        logits = self.decode_all(tgt_ids, memory, src_mask)
        return (logits, self.length_logits(memory, src_mask)) if with_length else logits

    def decode_all(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) for every target position at once; padding (pad_id) is never attended to."""
        self_mask = key_mask(padding_mask(tgt_ids, self.config.pad_id))  # (B, 1, 1, T): no causal mask
        cross_mask = None if src_mask is None else key_mask(src_mask)  # (B, 1, 1, S)
        hidden, _ = self.decoder(self.tgt_embed(tgt_ids), memory, self_mask, cross_mask)
        return self.output(hidden)

    def length_logits(self, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Scores (B, max_len + 1) of each target length, from the mean of the memory's real positions."""
        if src_mask is None:
            pooled = memory.mean(dim=1)  # (B, D)
        else:
            real = src_mask.unsqueeze(-1).to(memory.dtype)  # (B, S, 1)
            pooled = (memory * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)  # (B, D)
        return self.length_head(pooled)

    def start(self, inputs: Tensor, max_new_tokens: int, use_cache: bool = True, beams: int = 1):
        raise TypeError("a CMLM checkpoint decodes non-autoregressively: use strategy mask-predict")

    def attention_maps(self, src_ids: Tensor, tgt_in_ids: Tensor) -> dict[str, list[Tensor]]:
        raise TypeError("attention maps are drawn for autoregressive models; a CMLM has no causal decoder")


def length_targets(tgt: Tensor, pad_id: int) -> Tensor:
    """(B,) the number of real tokens of each target row (B, T)."""
    return (tgt != pad_id).sum(dim=1)


@torch.no_grad()
def predicted_lengths(model: CMLM, memory: Tensor, src_mask: Tensor | None, beam: int) -> Tensor:
    """(B, beam) the ``beam`` likeliest target lengths (at least 1), likeliest first."""
    scores = model.length_logits(memory, src_mask)  # (B, max_len + 1)
    scores[:, 0] = float("-inf")  # a translation has at least one token
    return scores.topk(min(beam, scores.size(1) - 1), dim=-1).indices
