"""Tokenizers of imported GPT-2 and BERT checkpoints, through the Hugging Face ``tokenizers`` library (one
``tokenizer.json``: GPT-2's byte-level BPE, BERT's WordPiece). Ids equal the Hugging Face tokenizer's."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizerModel

from aiayn.tokenizer import TokenizerPair

FILE = "tokenizer.json"


class HFTokenizer:
    """``encode(text) -> ids`` without special tokens (a model's own conventions add them), ``decode(ids)``
    without special tokens. Ids past the tokenizer's vocabulary (a padding row aiayn appended) are dropped."""

    def __init__(self, json_text: str) -> None:
        self.tok = HFTokenizerModel.from_str(json_text)
        self.proto = json_text.encode()  # identity, for draft checks
        self.size = self.tok.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

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

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE).write_bytes(self.src.proto)
