"""Tokenizer files as released models ship them: a ``tokenizer.json`` may fix padding to 128 tokens and
truncation to 16, add tokens, lower-case (BERT uncased), add special tokens in a post-processor, fall back to
bytes. Whatever the file says, aiayn's ids equal ``transformers``' for the same text (no padding, no
truncation). (A sentence-transformers model whose file pads to 128: ``tests/interop/test_sentence.py``.)"""

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from aiayn.tokenizers.hf import HFTokenizer

CORPUS = ["A man rides a horse.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch über Kätzchen.",
          "Children laugh and play outside in the park.", "一个男人骑着马。"] * 10
TEXTS = ["A man rides a horse.", "ZWEI Hunde Spielen im Schnee und " * 6, "naïve café 🐎 一个男人 <extra> ok",
         "  spaces   inside  ", "x"]


def _bpe(byte_fallback: bool = False) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="[UNK]", byte_fallback=byte_fallback))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + ([f"<0x{b:02X}>" for b in range(256)] if byte_fallback else [])
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()]) if byte_fallback else None
    return tok


def _padded(tok: Tokenizer) -> Tokenizer:
    tok.enable_padding(length=128, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    return tok


def _truncated(tok: Tokenizer) -> Tokenizer:
    tok.enable_truncation(16)
    return tok


def _added(tok: Tokenizer) -> Tokenizer:
    tok.add_tokens([AddedToken("<extra>", special=False)])
    tok.add_special_tokens([AddedToken("<|turn|>", special=True)])
    return tok


def _lowercased(tok: Tokenizer) -> Tokenizer:
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    return tok


def _post_processed(tok: Tokenizer) -> Tokenizer:
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                               ("[SEP]", sep)])
    return tok


SETTINGS = {"padding to 128": lambda: _padded(_bpe()), "truncation to 16": lambda: _truncated(_bpe()),
            "added tokens": lambda: _added(_bpe()), "lower-casing normalizer": lambda: _lowercased(_bpe()),
            "post-processor specials": lambda: _post_processed(_bpe()), "byte fallback": lambda: _bpe(True),
            "all at once": lambda: _truncated(_padded(_post_processed(_lowercased(_added(_bpe(True))))))}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_ids_equal_transformers_whatever_the_file_sets(tmp_path, setting):
    from transformers import PreTrainedTokenizerFast

    path = tmp_path / "tokenizer.json"
    SETTINGS[setting]().save(str(path))
    ours = HFTokenizer(path.read_text(encoding="utf-8"))
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(path))
    pad = theirs.convert_tokens_to_ids("[PAD]")
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs(text).input_ids, (setting, text)
        assert pad not in ids, (setting, text)
    assert len(ours.encode(TEXTS[1])) > 16  # the file's truncation is not aiayn's length policy
    assert [len(ids) for ids in ours.encode_batch(TEXTS)] == [len(ours.encode(t)) for t in TEXTS]  # nor its padding
