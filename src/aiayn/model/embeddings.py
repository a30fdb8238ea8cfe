"""Input embeddings (section 3.4) plus positions (section 3.5), with dropout (section 5.4)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.model.dropout import Dropout
from aiayn.model.positions import LearnedPositions, SinusoidalPositions


def check_ids(ids: Tensor, vocab: int) -> None:
    """A clear ValueError for token ids outside [0, vocab), before any lookup (a compiled step's ids are its own
    choices: not checked there)."""
    if ids.numel() and not torch.compiler.is_compiling() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab}); got values in [{int(ids.min())}, {int(ids.max())}]")


class TokenEmbedding(nn.Embedding):
    """A (vocab, d_model) lookup table whose output is multiplied by sqrt(d_model) (section 3.4; ``scale``
    False leaves it as it is, as GPT-2 and BERT do).

    Ids outside [0, vocab) raise a clear ValueError before any computation. ``padding_idx``: that row gets no
    gradient through the lookup (as Hugging Face's; it matters where decoding starts from the pad id, as
    Marian's does: elsewhere padding is masked and gets none anyway).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, scale: bool = True,
                 padding_idx: int | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.scale = math.sqrt(embedding_dim) if scale else 1.0

    def forward(self, ids: Tensor) -> Tensor:
        check_ids(ids, self.num_embeddings)
        embedded = super().forward(ids)
        return embedded if self.scale == 1.0 else embedded * self.scale


class InputEmbedding(nn.Module):
    """ids -> token embedding x sqrt(d_model) + absolute positions -> dropout.

    Args:
        tokens: the token table (possibly shared with another embedding or the output layer).
        positions: SinusoidalPositions, LearnedPositions, or None (rotary positions act in attention).
        norm: a LayerNorm applied to the sum before dropout (BERT), or None (the paper).
    Shape: ids (B, T) -> (B, T, d_model).
    """

    def __init__(self, tokens: TokenEmbedding, positions: nn.Module | None, dropout: float = 0.1,
                 norm: nn.LayerNorm | None = None) -> None:
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.norm = norm
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        x = self.tokens(ids)  # (B, T, D)
        if self.positions is not None:
            x = x + self.positions(ids.size(1), offset, like=x)  # (T, D) broadcast over B, or (B, T, D)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


def build_positions(kind: str, d_model: int, max_len: int, base: float, halves: bool = False) -> nn.Module | None:
    """The absolute-position module for a config's ``positions`` kind (None for rope and none);
    ``halves``: Marian's sinusoid layout."""
    if kind == "sinusoidal":
        return SinusoidalPositions(d_model, base, halves)
    if kind == "learned":
        return LearnedPositions(max_len, d_model)
    return None
