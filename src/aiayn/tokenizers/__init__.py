"""Tokenizers: one interface (:class:`Tokenizer`), three kinds, one loader.

- ``sentencepiece``: aiayn's own (BPE, unigram or characters), trained on your data.
- ``marian``: an imported OPUS-MT checkpoint's SentencePiece models with Marian's ``vocab.json``.
- ``hf``: an imported GPT-2 or BERT checkpoint's ``tokenizer.json`` (Hugging Face ``tokenizers``).

``load_tokenizers(folder)`` picks the kind by the files in the folder.
"""

from __future__ import annotations

from pathlib import Path

from aiayn.tokenizers.base import Tokenizer, TokenizerPair
from aiayn.tokenizers.hf import HFTokenizers
from aiayn.tokenizers.marian import MarianTokenizers
from aiayn.tokenizers.sentencepiece import MODEL_TYPES, SentencePiecePair, SentencePieceTokenizer

__all__ = ["MODEL_TYPES", "HFTokenizers", "MarianTokenizers", "SentencePiecePair", "SentencePieceTokenizer",
           "Tokenizer", "TokenizerPair", "load_tokenizers"]


def load_tokenizers(folder: str | Path) -> TokenizerPair:
    """The tokenizers saved in ``folder``: ``tokenizer.json`` (GPT-2, BERT, Llama) or GPT-2's ``vocab.json`` +
    ``merges.txt``, Marian's ``vocab.json`` with its
    SentencePiece models, or aiayn's ``tokenizer.model`` (``tokenizer.src.model`` + ``tokenizer.tgt.model``)."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file() or (folder / "merges.txt").is_file():
        return HFTokenizers.load(folder)
    if (folder / "vocab.json").is_file():
        return MarianTokenizers.load(folder)
    return SentencePiecePair.load(folder)
