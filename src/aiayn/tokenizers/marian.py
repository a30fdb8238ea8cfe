"""Marian's (OPUS-MT's) tokenizers, as imported checkpoints carry them: a SentencePiece model per side whose
pieces map to ids through one ``vocab.json`` (Marian's ids are not SentencePiece's). The ids equal those of
Hugging Face's ``MarianTokenizer``: a leading language code such as ``>>fra<<`` is one token, a piece
outside the vocabulary is ``<unk>``, and the source ends with ``</s>``."""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm

from aiayn.tokenizers.base import Tokenizer, TokenizerPair

FILES = ("source.spm", "target.spm", "vocab.json")


class MarianSide(Tokenizer):
    """One side: ``encode(text) -> ids`` (with a final ``</s>`` when ``add_eos``), ``decode(ids) -> text``."""

    def __init__(self, spm_bytes: bytes, vocab: dict[str, int], add_eos: bool) -> None:
        self.sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
        self.vocab, self.add_eos = vocab, add_eos
        self.by_id = {i: piece for piece, i in vocab.items()}
        self.eos_id, self.unk_id, self.pad_id = vocab["</s>"], vocab["<unk>"], vocab.get("<pad>", len(vocab) - 1)
        self.proto = spm_bytes + json.dumps(vocab, sort_keys=True).encode()  # identity, for draft checks

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a target-language code, one token
            code, text = [text[: end + 2]], text[end + 2:]
        pieces = code + (self.sp.encode(text, out_type=str) if text else [])
        ids = [self.vocab.get(p, self.unk_id) for p in pieces]
        return [*ids, self.eos_id] if self.add_eos else ids

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.by_id.get(i, "<unk>") for i in ids]

    def encode_masked(self, text: str) -> list[int]:
        raise ValueError("a Marian tokenizer has no mask token; fill-mask needs an encoder-only checkpoint")

    def special_ids(self) -> list[int]:
        """``</s>``, ``<unk>`` and ``<pad>``."""
        return sorted({self.eos_id, self.unk_id, self.pad_id})

    def token_text(self, token_id: int) -> str:
        return self.by_id.get(token_id, "<unk>").replace("\u2581", " ")

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` without ``</s>``, ``<pad>`` and ``<unk>`` (as Hugging Face's
        ``decode(skip_special_tokens=True)``)."""
        pieces = self.pieces([i for i in ids if i not in (self.eos_id, self.pad_id, self.unk_id)])
        return self.sp.decode_pieces(pieces).replace("\u2581", " ").strip()


class MarianTokenizers(TokenizerPair):
    """The source side (ends with ``</s>``) and the target side of a Marian checkpoint."""

    def __init__(self, source: bytes, target: bytes, vocab: dict[str, int]) -> None:
        super().__init__(MarianSide(source, vocab, add_eos=True), MarianSide(target, vocab, add_eos=False))
        self._files = {"source.spm": source, "target.spm": target,
                      "vocab.json": json.dumps(vocab, ensure_ascii=False).encode()}

    @classmethod
    def load(cls, folder: str | Path) -> MarianTokenizers:
        folder = Path(folder)
        for name in FILES:
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: missing; a Marian tokenizer needs {', '.join(FILES)}")
        try:
            vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{folder / 'vocab.json'}: not valid JSON (line {err.lineno}): {err.msg}") from None
        if not isinstance(vocab, dict) or "</s>" not in vocab or "<unk>" not in vocab:
            raise ValueError(f"{folder / 'vocab.json'}: expected an object of piece -> id with </s> and <unk>")
        return cls((folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes(), vocab)

    def files(self) -> dict[str, bytes]:
        return dict(self._files)
