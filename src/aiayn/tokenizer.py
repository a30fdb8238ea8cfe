"""Subword tokenizers: SentencePiece (BPE, unigram, or characters) with the project's fixed special ids.

pad 0, bos 1, eos 2, unk 3 (and <mask> 4) for every tokenizer, so a config's special ids hold whatever was trained.
Byte fallback is on and normalisation is off, so any Unicode text round-trips through encode/decode.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from aiayn.config import FIRST_ORDINARY_ID, MASK_ID, SPECIAL_IDS

__all__ = ["FIRST_ORDINARY_ID", "MASK_ID", "MODEL_TYPES", "SPECIAL_IDS", "Tokenizer", "TokenizerPair"]
MODEL_TYPES = ("bpe", "unigram", "char")


class Tokenizer:
    """A trained SentencePiece model. ``encode(text) -> ids`` (no BOS/EOS), ``decode(ids) -> text``."""

    def __init__(self, model_proto: bytes) -> None:
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, model_type: str = "bpe",
              character_coverage: float = 0.9995, max_sentences: int = 2_000_000) -> Tokenizer:
        """Train on ``texts`` (one sentence each). ``model_type``: bpe | unigram | char (one piece per
        character seen, every other character through its bytes; ``vocab_size`` is then ignored).

        The vocabulary may come out smaller than asked when the text is small (hard_vocab_limit off).
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(f"tokenizer type: unknown value {model_type!r}; choose bpe or unigram (subwords) or char")
        sentences = [t for t in texts if t.strip()]
        if not sentences:
            raise ValueError("tokenizer: no text to train on")
        buffer = io.BytesIO()
        try:
            _train_spm(sentences, buffer, vocab_size, model_type, character_coverage, max_sentences)
        except RuntimeError as err:
            raise ValueError(f"tokenizer: SentencePiece could not train ({str(err).split('] ')[-1]}); "
                             "with byte fallback the vocabulary needs 256 byte pieces plus the characters: "
                             "raise --vocab-size") from None
        return cls(buffer.getvalue())


    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
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
        return [t for t, nxt in zip(ids, [*ids[1:], None], strict=True) if not (t == space and nxt == MASK_ID)]

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
               character_coverage: float, max_sentences: int) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buffer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0 if model_type == "char" else character_coverage,
        byte_fallback=True, add_dummy_prefix=model_type != "char",
        normalization_rule_name="identity", remove_extra_whitespaces=False, hard_vocab_limit=False,
        input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=2,
        minloglevel=2, **SPECIAL_IDS, pad_piece="<pad>", bos_piece="<s>", eos_piece="</s>",
        unk_piece="<unk>", user_defined_symbols=["<mask>"])


class TokenizerPair:
    """Source and target tokenizers; ``joint`` when one model serves both sides."""

    def __init__(self, src: Tokenizer, tgt: Tokenizer | None = None) -> None:
        self.src = src
        self.tgt = tgt if tgt is not None else src

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @classmethod
    def train(cls, sources: list[str], targets: list[str], vocab_size: int = 8000, joint: bool = True,
              model_type: str = "bpe") -> TokenizerPair:
        if joint:
            return cls(Tokenizer.train(sources + targets, vocab_size, model_type))
        return cls(Tokenizer.train(sources, vocab_size, model_type), Tokenizer.train(targets, vocab_size, model_type))

    def save(self, folder: Path) -> None:
        """``tokenizer.model`` when joint, else ``tokenizer.src.model`` and ``tokenizer.tgt.model``."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.joint:
            self.src.save(folder / "tokenizer.model")
        else:
            self.src.save(folder / "tokenizer.src.model")
            self.tgt.save(folder / "tokenizer.tgt.model")

    @classmethod
    def load(cls, folder: str | Path) -> TokenizerPair:
        """aiayn's own SentencePiece files, or an imported checkpoint's: ``tokenizer.json`` (GPT-2, BERT) or
        Marian's ``vocab.json`` with its SentencePiece models."""
        folder = Path(folder)
        if (folder / "tokenizer.json").is_file():
            from aiayn.tokenizer_hf import HFTokenizers

            return HFTokenizers.load(folder)
        if (folder / "vocab.json").is_file():
            from aiayn.tokenizer_marian import MarianTokenizers

            return MarianTokenizers.load(folder)
        if (folder / "tokenizer.model").is_file():
            return cls(Tokenizer.load(folder / "tokenizer.model"))
        if (folder / "tokenizer.src.model").is_file():
            return cls(Tokenizer.load(folder / "tokenizer.src.model"), Tokenizer.load(folder / "tokenizer.tgt.model"))
        raise FileNotFoundError(f"{folder}: no tokenizer.model (or tokenizer.src.model) in this folder")
