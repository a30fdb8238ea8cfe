"""The token table of a quantized copy in 8 bits (section 3.4's embedding, as llama.cpp keeps ``token_embd``):
looked up from the packed rows of the output projection it is tied to, or from a Q8_0 table of its own."""

from __future__ import annotations

from torch import Tensor, nn

from aiayn.io.rows import rows_of
from aiayn.kernels import quant
from aiayn.model.embeddings import check_ids
from aiayn.model.quantized import Int8Linear, q8_grouped


class QuantizedEmbedding(nn.Module):
    """A token table (vocab, D) looked up from 8-bit rows, a scale per group of 32 (section 3.4's embedding, as
    llama.cpp keeps ``token_embd`` in Q8_0): a quantized copy holds no float32 table beside its packed weights.

    With ``tied`` (the output projection it shares its weight with, an
    :class:`~aiayn.model.quantized.Int8Linear` on aiayn's kernels' packing, ``grouped``) the rows are read from that
    layer's packed weights: the table costs nothing more; else the table is quantized alone, the same way
    (:func:`~aiayn.model.quantized.q8_grouped`). Ids outside [0, vocab) raise a ValueError
    (:func:`~aiayn.model.embeddings.check_ids`), as :class:`~aiayn.model.embeddings.TokenEmbedding`'s do.

    Shape: ids (...) -> (..., D), in the table's dtype, times the embedding's ``scale``.
    """

    def __init__(self, embedding: nn.Embedding, tied: nn.Module | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = embedding.num_embeddings, embedding.embedding_dim
        self.scale, self.dtype = getattr(embedding, "scale", 1.0), embedding.weight.dtype
        self.tied = isinstance(tied, Int8Linear) and tied.grouped
        if self.tied:
            self.packed, self.scales = tied.packed, tied.scales
        else:
            self.packed, self.scales = q8_grouped(rows_of(embedding.weight))  # (N'/4, G, 128), (N'/4, G, 4)

    def forward(self, ids: Tensor) -> Tensor:
        check_ids(ids, self.num_embeddings)
        flat = ids.reshape(-1)
        quad, row = flat // 4, flat % 4  # (n,) each: the rows' place in the four-row packing
        q = self.packed.view(*self.packed.shape[:2], 4, quant.GROUP)[quad, :, row]  # (n, G, 32)
        rows = q.to(self.dtype) * self.scales[quad, :, row].to(self.dtype)[..., None]  # (n, G, 32)
        out = rows.reshape(*ids.shape, self.embedding_dim)  # (..., D)
        return out if self.scale == 1.0 else out * self.scale

    @property
    def kernel(self) -> str:
        """What its lookup reads, in words (``aiayn generate --verbose``)."""
        return "token table in int8, groups of 32 (" + (
            "the tied output projection's packed rows)" if self.tied else "Q8_0, its own)")

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, tied={self.tied}"
