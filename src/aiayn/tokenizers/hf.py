"""Tokenizers of imported GPT-2 and BERT checkpoints, through the Hugging Face ``tokenizers`` library (one
``tokenizer.json``: GPT-2's byte-level BPE, BERT's WordPiece). Ids equal the Hugging Face tokenizer's."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizerModel

from aiayn.tokenizers.base import Tokenizer, TokenizerPair

FILE = "tokenizer.json"


class HFTokenizer(Tokenizer):
    """``encode(text) -> ids`` as the Hugging Face tokenizer gives them (BERT's [CLS] ... [SEP] included),
    ``decode(ids)`` without special tokens. Ids past the tokenizer's vocabulary (a padding row aiayn
    appended) are dropped."""

    def __init__(self, json_text: str) -> None:
        self.tok = HFTokenizerModel.from_str(json_text)
        self.proto = json_text.encode()  # identity, for draft checks
        self.size = self.tok.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def encode_batch(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        if dropout:
            return super().encode_batch(texts, dropout)  # the refusal: tokenizer.json fixes its own dropout
        return [e.ids for e in self.tok.encode_batch(texts)]

    def encode_masked(self, text: str) -> list[int]:
        """Ids of a text with ``<mask>`` words: each becomes the tokenizer's mask token (BERT's [MASK])."""
        mask = next((t for t in ("[MASK]", "<mask>") if self.tok.token_to_id(t) is not None), None)
        if mask is None:
            raise ValueError("tokenizer.json: no mask token ([MASK] or <mask>); this tokenizer cannot fill masks")
        return self.encode(text.replace("<mask>", mask))

    def special_ids(self) -> list[int]:
        """The ids of the tokenizer's special tokens ([CLS], [SEP], [PAD], [MASK], ...)."""
        return [i for i, token in self.tok.get_added_tokens_decoder().items() if token.special]

    def token_text(self, token_id: int) -> str:
        return self.tok.decode([token_id])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([i for i in ids if i < self.size], skip_special_tokens=True)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.tok.id_to_token(i) if i < self.size else "<pad>" for i in ids]

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)


class HFTokenizers(TokenizerPair):
    """One ``tokenizer.json`` for both sides (decoder-only and encoder-only models have one side)."""

    def __init__(self, json_text: str) -> None:
        super().__init__(HFTokenizer(json_text))

    @classmethod
    def load(cls, folder: str | Path) -> HFTokenizers:
        path = Path(folder) / FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; save the tokenizer with a fast (tokenizers) tokenizer's "
                                    "save_pretrained to get it")
        try:
            return cls(path.read_text(encoding="utf-8"))
        except Exception as err:  # the library's parse errors carry no file name
            raise ValueError(f"{path}: not a tokenizers file ({str(err).splitlines()[0]})") from None

    def files(self) -> dict[str, bytes]:
        return {FILE: self.src.proto}
