"""Fill the mask with an encoder-only (BERT-style) model: the most likely tokens for each <mask>."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from aiayn.inference.load import load_checkpoint
from aiayn.inference.precision import inference_copy
from aiayn.model.transformer import EncoderOnly
from aiayn.tokenizers import TokenizerPair

MASK = "<mask>"


@dataclass(frozen=True)
class Candidate:
    token: str  # the piece as text (a leading space marks the start of a word)
    token_id: int
    probability: float


class MaskFiller:
    """Top-k predictions for every ``<mask>`` in a text, from one bidirectional pass (BERT, section 3.1)."""

    def __init__(self, model: EncoderOnly, tokenizers: TokenizerPair, device: torch.device | str = "cpu",
                 own: bool = False) -> None:
        """``own``: ``model`` is handed over and made the inference copy in place (else it is copied)."""
        if model.config.arch != "encoder-only":
            raise ValueError(f"fill-mask needs an encoder-only checkpoint, not {model.config.arch}")
        self.model = inference_copy(model, device, own=own)
        self.tokenizer, self.device = tokenizers.src, torch.device(device)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", prepare=None) -> MaskFiller:
        model, tokenizers = load_checkpoint(path, "encoder-only", prepare)
        return cls(model, tokenizers, device, own=True)

    def ids(self, text: str) -> list[int]:
        """The text's ids, each ``<mask>`` one mask id (the tokenizer's conventions: aiayn's own, or
        BERT's [CLS] ... [SEP]); a text without a mask, or too long, is a ValueError."""
        ids = self.tokenizer.encode_masked(" ".join(text.split()))
        if self.model.config.mask_id not in ids:
            raise ValueError(f"text: no {MASK} in it; mark each word to predict with {MASK}")
        if len(ids) > self.model.config.max_len:
            raise ValueError(f"text: {len(ids)} tokens, more than the model's {self.model.config.max_len}")
        return ids

    @torch.no_grad()
    def fill(self, text: str, top_k: int = 5) -> list[list[Candidate]]:
        """For each mask, left to right, the ``top_k`` most likely ordinary tokens with their probabilities."""
        ids = torch.tensor([self.ids(text)], device=self.device)  # (1, S)
        logits = self.model(ids)[0].float()  # (S, V)
        logits[:, self.tokenizer.special_ids()] = float("-inf")  # never predict a special token
        probs = logits[ids[0] == self.model.config.mask_id].softmax(dim=-1)  # (M, V)
        best = probs.topk(min(top_k, probs.size(-1)), dim=-1)
        return [[Candidate(self.tokenizer.token_text(i), i, p) for p, i in zip(ps.tolist(), ix.tolist(), strict=True)]
                for ps, ix in zip(best.values, best.indices, strict=True)]
