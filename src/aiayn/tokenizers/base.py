"""The one tokenizer interface every kind implements (SentencePiece, Marian, Hugging Face ``tokenizers``), and
the pair of sides a checkpoint carries. A checkpoint's tokenizer is loaded by ``aiayn.tokenizers.load_tokenizers``,
which picks the kind by the files in the folder."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class Tokenizer(ABC):
    """One side's tokenizer: text <-> ids.

    ``proto`` (bytes) identifies the tokenizer: two tokenizers with equal ``proto`` give equal ids (the draft
    model's check in speculative decoding).
    """

    proto: bytes

    @abstractmethod
    def __len__(self) -> int:
        """The vocabulary size."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (what the model reads; BOS/EOS only where the kind adds them itself)."""

    def encode_batch(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        """Ids of each text; ``dropout`` > 0: a subword-dropout sample, where the kind supports it."""
        if dropout:
            raise ValueError(f"subword_dropout: {type(self).__name__} has no subword dropout; use 0")
        return [self.encode(t) for t in texts]

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens left out."""

    @abstractmethod
    def pieces(self, ids: list[int]) -> list[str]:
        """The subword strings of ``ids`` (for pictures and debugging)."""

    @abstractmethod
    def encode_masked(self, text: str) -> list[int]:
        """Ids of a text whose ``<mask>`` words become the kind's mask token (fill-mask)."""

    @abstractmethod
    def special_ids(self) -> list[int]:
        """Ids that are never a prediction (padding, BOS, EOS, UNK, mask, ...)."""

    @abstractmethod
    def token_text(self, token_id: int) -> str:
        """One token as the text it stands for."""

    def newline_ids(self) -> list[int]:
        """The ids of a line break between two lines of running text (a language model's corpus)."""
        return [self.sp.piece_to_id("<0x0A>")]  # SentencePiece: byte fallback's piece for "\n"


class TokenizerPair:
    """Source and target tokenizers; ``joint`` when one serves both sides. ``files()`` are what ``save`` writes
    into a checkpoint folder (each kind names its own), so that ``load_tokenizers`` finds them again."""

    def __init__(self, src: Tokenizer, tgt: Tokenizer | None = None) -> None:
        self.src = src
        self.tgt = tgt if tgt is not None else src

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    def files(self) -> dict[str, bytes]:
        raise NotImplementedError(f"{type(self).__name__}: a tokenizer pair names the files it saves")

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in self.files().items():
            (folder / name).write_bytes(data)
