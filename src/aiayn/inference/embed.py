"""Sentence embeddings from an encoder-only checkpoint: the encoder's hidden states pooled into one vector per
text (mean, CLS, max, ... as sentence-transformers does), optionally L2-normalised. The pooling of an imported
sentence-transformers folder travels in the checkpoint's ``embedding.json``; without it, mean pooling."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.inference.load import load_checkpoint
from aiayn.inference.precision import inference_copy
from aiayn.io.files import atomic_write_text
from aiayn.io.run import resolve_checkpoint
from aiayn.model.transformer import EncoderOnly
from aiayn.tokenizers import TokenizerPair

EMBEDDING = "embedding.json"
MODES = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")


@dataclass(frozen=True)
class Pooling:
    """How token states become one vector (sentence-transformers' ``Pooling`` and ``Normalize`` modules).

    Args:
        mode: mean (over real tokens) | cls (the first token) | max (per dimension, padding excluded) |
            mean_sqrt_len (the sum over sqrt(length)) | weightedmean (token i weighted i + 1) | lasttoken.
        normalize: divide each vector by its L2 norm (cosine similarity becomes a dot product).
        max_seq_length: longer inputs are cut to this many tokens (their last special token kept); None =
            the model's max_len.
    """

    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"pooling mode {self.mode!r} is not supported; aiayn has {', '.join(MODES)}")

    def save(self, folder: Path) -> None:
        atomic_write_text(Path(folder) / EMBEDDING, json.dumps(dataclasses.asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Pooling:
        """The checkpoint's pooling (``embedding.json``), or mean pooling when it has none."""
        path = Path(folder) / EMBEDDING
        if not path.is_file():
            return cls()
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}: {err}") from None


def pool(hidden: Tensor, mask: Tensor, mode: str) -> Tensor:
    """(B, S, D) token states and a (B, S) bool mask (True = real token) -> (B, D) vectors."""
    weights = mask.to(hidden.dtype)[..., None]  # (B, S, 1)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return hidden.masked_fill(~mask[..., None], float("-inf")).max(dim=1).values
    if mode == "lasttoken":
        last = mask.long().sum(dim=1) - 1  # (B,): real tokens are at the front
        return hidden[torch.arange(hidden.size(0)), last]
    if mode == "weightedmean":
        weights = weights * torch.arange(1, hidden.size(1) + 1, dtype=hidden.dtype)[None, :, None]
    total = (hidden * weights).sum(dim=1)  # (B, D)
    count = weights.sum(dim=1).clamp(min=1e-9)  # (B, 1)
    return total / count.sqrt() if mode == "mean_sqrt_len" else total / count


class Embedder:
    """One vector per text from an encoder-only model: ``embed(texts) -> (N, D)`` float32.

    Args:
        model: an encoder-only model (BERT-style); tokenizers: its tokenizers.
        pooling: how token states become a vector (the checkpoint's :class:`Pooling` by default).
        batch_size: texts encoded together (padded to the longest of them).
    """

    def __init__(self, model: EncoderOnly, tokenizers: TokenizerPair, pooling: Pooling | None = None,
                 device: torch.device | str = "cpu", batch_size: int = 32, own: bool = False) -> None:
        """``own``: ``model`` is handed over and made the inference copy in place (one already made, a
        ``MaskFiller``'s, is shared as it is); else it is copied."""
        if model.config.arch != "encoder-only":
            raise ValueError(f"embed needs an encoder-only checkpoint, not {model.config.arch}")
        self.model = inference_copy(model, device, own=own)
        self.tokenizer, self.device = tokenizers.src, torch.device(device)
        self.pooling, self.batch_size = pooling or Pooling(), batch_size
        self.max_len = min(self.pooling.max_seq_length or model.config.max_len, model.config.max_len)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", prepare=None,
                        **options) -> Embedder:
        """``prepare`` as in ``load_checkpoint`` (``--tensor-parallel``: the model split over processes)."""
        model, tokenizers = load_checkpoint(path, "encoder-only", prepare)
        return cls(model, tokenizers, Pooling.load(resolve_checkpoint(path)), device, own=True, **options)

    def ids(self, text: str) -> list[int]:
        """The text's ids, cut to ``max_len`` with the last (closing special) token kept, as transformers cuts."""
        ids = self.tokenizer.encode(text)
        return ids if len(ids) <= self.max_len else ids[: self.max_len - 1] + ids[-1:]

    @torch.no_grad()
    def embed(self, texts: list[str]) -> Tensor:
        """(N, D) float32 vectors, one per text, in order."""
        out = [self._batch(texts[i: i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return torch.cat(out) if out else torch.zeros(0, self.model.config.d_model)

    def _batch(self, texts: list[str]) -> Tensor:
        """Vectors of ``texts``; a text without tokens (empty, or spaces a tokenizer drops) is the zero vector."""
        rows = [self.ids(t) for t in texts]
        kept = [i for i, row in enumerate(rows) if row]
        out = torch.zeros(len(rows), self.model.config.d_model)
        if kept:
            out[kept] = self._vectors([rows[i] for i in kept])
        return out

    def _vectors(self, rows: list[list[int]]) -> Tensor:
        pad = self.model.config.pad_id
        ids = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)  # (B, S)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        mask = torch.arange(ids.size(1))[None] < torch.tensor([len(r) for r in rows])[:, None]  # (B, S)
        hidden = self.model.encode(ids.to(self.device), mask.to(self.device)).float().cpu()  # (B, S, D)
        vectors = pool(hidden, mask, self.pooling.mode)
        return F.normalize(vectors, dim=-1) if self.pooling.normalize else vectors
