"""aiayn's own subword tokenizers: SentencePiece (BPE, unigram, or characters) with the project's fixed special ids.

pad 0, bos 1, eos 2, unk 3 (and <mask> 4) for every tokenizer, so a config's special ids hold whatever was trained.
Byte fallback is on and normalisation is off, so any Unicode text round-trips through encode/decode.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from aiayn.model.config import FIRST_ORDINARY_ID, MASK_ID, SPECIAL_IDS
from aiayn.tokenizers.base import Tokenizer, TokenizerPair

MODEL_TYPES = ("bpe", "unigram", "char")


class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model. ``encode(text) -> ids`` (no BOS/EOS), ``decode(ids) -> text``."""

    def __init__(self, model_proto: bytes) -> None:
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, model_type: str = "bpe",
              character_coverage: float = 0.9995, max_sentences: int = 2_000_000,
              symbols: Iterable[str] = ()) -> SentencePieceTokenizer:
        """Train on ``texts`` (one sentence each). ``model_type``: bpe | unigram | char (one piece per
        character seen, every other character through its bytes; ``vocab_size`` is then ignored). ``symbols``:
        strings that are always one token each, wherever they stand (ids after ``<mask>``; e.g. language tags).

        The vocabulary may come out smaller than asked when the text is small (hard_vocab_limit off).
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(f"tokenizer type: unknown value {model_type!r}; choose bpe or unigram (subwords) or char")
        sentences = [t for t in texts if t.strip()]
        if not sentences:
            raise ValueError("tokenizer: no text to train on")
        buffer = io.BytesIO()
        try:
            _train_spm(sentences, buffer, vocab_size, model_type, character_coverage, max_sentences, list(symbols))
        except RuntimeError as err:
            raise ValueError(f"tokenizer: SentencePiece could not train ({str(err).split('] ')[-1]}); "
                             "with byte fallback the vocabulary needs 256 byte pieces plus the characters: "
                             "raise --vocab-size") from None
        return cls(buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no tokenizer model here")
        return cls(path.read_bytes())

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.proto)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        """Ids of each text. ``dropout`` > 0: a BPE-dropout sample (Provilkov et al., 2020), each merge
        skipped with that probability; SentencePiece's sampler cannot be seeded across processes."""
        if not dropout:
            return self.sp.encode(texts, out_type=int)
        return self.sp.encode(texts, out_type=int, enable_sampling=True, alpha=dropout)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode([i for i in ids if i >= FIRST_ORDINARY_ID or i == SPECIAL_IDS["unk_id"]])

    def pieces(self, ids: list[int]) -> list[str]:
        """The subword strings of ``ids`` (for pictures and debugging)."""
        return [self.sp.id_to_piece(i) for i in ids]

    def encode_masked(self, text: str) -> list[int]:
        """Ids of a text with ``<mask>`` words, each one MASK_ID standing for a whole piece (the word-start
        marker the tokenizer puts before it is dropped: in training a masked piece carries its own)."""
        ids = self.encode(text)
        space = self.sp.piece_to_id("\u2581")  # SentencePiece's word-start marker
        following = [*ids[1:], None][: len(ids)]  # an empty text has no ids, and nothing follows them
        return [t for t, nxt in zip(ids, following, strict=True) if not (t == space and nxt == MASK_ID)]

    def special_ids(self) -> list[int]:
        """Ids that are never a prediction (padding, BOS, EOS, UNK, mask)."""
        return list(range(FIRST_ORDINARY_ID))

    def token_text(self, token_id: int) -> str:
        """One token as text: a byte piece as its character (e.g. a newline), a word start as a space."""
        piece = self.sp.id_to_piece(token_id)
        if piece.startswith("<0x"):
            return self.sp.decode([token_id])
        return piece.replace("\u2581", " ")


def _train_spm(sentences: list[str], buffer: io.BytesIO, vocab_size: int, model_type: str,
               character_coverage: float, max_sentences: int, symbols: list[str]) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buffer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0 if model_type == "char" else character_coverage,
        byte_fallback=True, add_dummy_prefix=model_type != "char",
        normalization_rule_name="identity", remove_extra_whitespaces=False, hard_vocab_limit=False,
        input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=2,
        minloglevel=2, **SPECIAL_IDS, pad_piece="<pad>", bos_piece="<s>", eos_piece="</s>",
        unk_piece="<unk>", user_defined_symbols=["<mask>", *symbols])


class SentencePiecePair(TokenizerPair):
    """aiayn's SentencePiece tokenizers: ``tokenizer.model`` when joint, else ``tokenizer.src.model`` and
    ``tokenizer.tgt.model``."""

    @classmethod
    def train(cls, sources: list[str], targets: list[str], vocab_size: int = 8000, joint: bool = True,
              model_type: str = "bpe", symbols: Iterable[str] = ()) -> SentencePiecePair:
        """One tokenizer over both sides (``joint``) or one a side; ``symbols`` are single tokens of each."""
        def train(texts: list[str]) -> SentencePieceTokenizer:
            return SentencePieceTokenizer.train(texts, vocab_size, model_type, symbols=symbols)

        if joint:
            return cls(train(sources + targets))
        return cls(train(sources), train(targets))

    def files(self) -> dict[str, bytes]:
        if self.joint:
            return {"tokenizer.model": self.src.proto}
        return {"tokenizer.src.model": self.src.proto, "tokenizer.tgt.model": self.tgt.proto}

    @classmethod
    def load(cls, folder: str | Path) -> SentencePiecePair:
        folder = Path(folder)
        if (folder / "tokenizer.model").is_file():
            return cls(SentencePieceTokenizer.load(folder / "tokenizer.model"))
        if (folder / "tokenizer.src.model").is_file():
            return cls(SentencePieceTokenizer.load(folder / "tokenizer.src.model"),
                       SentencePieceTokenizer.load(folder / "tokenizer.tgt.model"))
        raise FileNotFoundError(f"{folder}: no tokenizer.model (or tokenizer.src.model) in this folder")
