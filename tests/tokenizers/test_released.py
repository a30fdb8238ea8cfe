"""The tokenizer files of released models (``../shared/data/tokenizers/``: GPT-2's byte-level BPE as vocab.json +
merges.txt, an OPUS-MT model's SentencePiece models + vocab.json with its real config) give the ids and the text
that ``transformers`` gives."""

import shutil
from pathlib import Path

import pytest

from aiayn.tokenizers import load_tokenizers

TOKENIZERS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tokenizers"
TEXTS = ["Hello world!  It's 2026 — naïve café.", "A man rides a horse.\nTwo dogs\tplay in the snow.",
         "  leading and trailing spaces  ", "Ünïcödé ß ẞ 🐎 一个男人骑着马。", "<|endoftext|>A new document", ""]


def test_gpt2_from_vocab_and_merges_equals_transformers(tmp_path):
    from transformers import GPT2Tokenizer, GPT2TokenizerFast

    folder = TOKENIZERS / "gpt2"
    ours = load_tokenizers(folder).src
    slow = GPT2Tokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    fast = GPT2TokenizerFast(str(folder / "vocab.json"), str(folder / "merges.txt"))
    assert len(ours) == len(slow) == 50257
    for text in TEXTS:
        assert ours.encode(text) == slow.encode(text) == fast.encode(text), text
        assert ours.decode(ours.encode(text)) == slow.decode(slow.encode(text), skip_special_tokens=True)
    fast.save_pretrained(tmp_path)  # the same tokenizer as one tokenizer.json gives the same ids
    from_json = load_tokenizers(tmp_path).src
    assert all(from_json.encode(text) == ours.encode(text) for text in TEXTS)


def test_opus_mt_spm_and_vocab_equal_transformers(tmp_path):
    from transformers import MarianTokenizer

    folder = tmp_path / "opus"
    shutil.copytree(TOKENIZERS / "opus-mt-en-mg", folder)
    ours = load_tokenizers(folder)
    theirs = MarianTokenizer.from_pretrained(folder)
    for text in TEXTS[:4]:
        ids = theirs(text).input_ids
        assert ours.src.encode(text) == ids, text
        assert ours.tgt.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize("name", ["gpt2", "opus-mt-en-mg"])
def test_the_released_files_are_present(name):
    assert (TOKENIZERS / name).is_dir()
