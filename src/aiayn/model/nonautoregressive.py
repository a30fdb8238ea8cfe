"""The non-autoregressive encoder-decoders: every target position at once, no causal mask and no step.

- CMLM: Mask-Predict's conditional masked language model (Ghazvininejad et al., 2019): the decoder attends over
  the whole target, ``<mask>`` included, and a length predictor reads the encoder output. Training masks some
  target tokens (``aiayn.training.tasks.CMLMTask``); decoding predicts every position and refines the least sure
  (``aiayn.decoding.mask_predict``).
- CTC: a decoder over the source upsampled whose best path is collapsed (Libovický & Helcl, 2018;
  ``aiayn.decoding.ctc``).

Their config says ``kind`` cmlm or ctc (``model/build.py`` builds them). They share Figure 1's parts with the
autoregressive ``EncoderDecoder`` (``EncoderDecoderBody``), not its step interface: decoding drives them with
:meth:`NonAutoregressive.decode_all`. Masks are bool, True = may attend.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.model.config import ModelConfig
from aiayn.model.masks import key_mask, padding_mask
from aiayn.model.transformer import EncoderDecoderBody


class NonAutoregressive(EncoderDecoderBody):
    """What the CMLM and the CTC model share: a decoder over the whole target at once."""

    strategy = ""  # the decoding strategy that drives it

    def decode_all(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) for every target position at once; padding (pad_id) is never attended to.

        Args:
            tgt_ids: (B, T) decoder inputs; memory: (B, S, D); src_mask: (B, S) bool, True = real source token.
        """
        self_mask = key_mask(padding_mask(tgt_ids, self.config.pad_id))  # (B, 1, 1, T): no causal mask
        cross_mask = None if src_mask is None else key_mask(src_mask)  # (B, 1, 1, S)
        hidden, _ = self.decoder(self.tgt_embed(tgt_ids), memory, self_mask, cross_mask)
        return self.project(hidden)

    def start(self, inputs: Tensor, max_new_tokens: int, use_cache: bool = True, beams: int = 1):
        """No step interface: the error names the strategy that decodes this model."""
        raise TypeError(f"a {type(self).__name__} checkpoint decodes non-autoregressively: use strategy "
                        f"{self.strategy}")


class CMLM(NonAutoregressive):
    """``forward(src_ids (B, S), tgt_ids (B, T)) -> logits (B, T, V)`` at every target position, each seeing
    all non-pad target tokens (``<mask>`` included); with ``with_length`` also the length logits (B, max_len + 1).

    The length predictor is a classifier over the mean of the encoder output (real source tokens only): one
    class per target length 0..max_len.
    """

    kind, strategy = "cmlm", "mask-predict"

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

    def length_logits(self, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Scores (B, max_len + 1) of each target length, from the mean of the memory's real positions."""
        if src_mask is None:
            pooled = memory.mean(dim=1)  # (B, D)
        else:
            real = src_mask.unsqueeze(-1).to(memory.dtype)  # (B, S, 1)
            pooled = (memory * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)  # (B, D)
        return self.length_head(pooled)

    @torch.no_grad()
    def predicted_lengths(self, memory: Tensor, src_mask: Tensor | None, beam: int) -> Tensor:
        """(B, beam) the ``beam`` likeliest target lengths (at least 1), likeliest first."""
        scores = self.length_logits(memory, src_mask)  # (B, max_len + 1)
        scores[:, 0] = float("-inf")  # a translation has at least one token
        return scores.topk(min(beam, scores.size(1) - 1), dim=-1).indices


class CTC(NonAutoregressive):
    """``forward(src_ids (B, S), inputs (B, U) | None) -> logits (B, U, V)``: one prediction per upsampled
    position, a token or the blank (``config.blank_id``, the ``<mask>`` id).

    The decoder's inputs default to :meth:`upsampled` (the source ids, each repeated ``ctc_upsample`` times:
    Gu et al.'s uniform copy at a fixed rate); glancing training (``aiayn.training.objective``) replaces some
    of them by the tokens of the reference's best alignment.
    """

    kind = strategy = "ctc"

    def forward(self, src_ids: Tensor, inputs: Tensor | None = None) -> Tensor:
        src_mask = padding_mask(src_ids, self.config.pad_id)  # (B, S), True = real token
        inputs = self.upsampled(src_ids) if inputs is None else inputs
        return self.decode_all(inputs, self.encode(src_ids), src_mask)

    def upsampled(self, src_ids: Tensor) -> Tensor:
        """(B, S) -> (B, S * upsample): each id repeated in place; right padding stays at the right."""
        return src_ids.repeat_interleave(self.config.ctc_upsample, dim=1)  # (B, U)
