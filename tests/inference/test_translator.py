"""The Translator: text in, text out, through aiayn.generate; empty and over-long lines."""

import pytest

import aiayn.inference.translator
from aiayn import EncoderDecoder
from aiayn.inference.translator import Translator
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer

from conftest import tiny

TEXTS = ["a b c d e", "f g h i j", "c d e f"] * 20


@pytest.fixture(scope="module")
def translator():
    tokenizers = SentencePiecePair(SentencePieceTokenizer.train(TEXTS, vocab_size=280))
    model = EncoderDecoder(tiny(vocab_size=len(tokenizers.src), max_len=8)).eval()
    return Translator(model, tokenizers, beam_size=2, max_len_a=0.0, max_len_b=4)


def test_every_batch_decodes_through_generate(translator, monkeypatch):
    calls = []
    real = aiayn.inference.translator.generate

    def counted(*args, **kwargs):
        calls.append((kwargs["config"].strategy, kwargs["config"].max_len_b))  # resolved once, by the translator
        return real(*args, **kwargs)

    monkeypatch.setattr(aiayn.inference.translator, "generate", counted)
    out = translator.translate(["a b", "c d e", "f"], batch_size=2)
    assert len(out) == 3 and calls == [("beam", 4), ("beam", 4)]
    translator.translate(["a b"], beam_size=1)
    assert calls[-1] == ("greedy", 4)


def test_empty_lines_translate_to_empty_and_long_ones_are_reported(translator):
    long = " ".join("abcdefghij")  # 10 words, more than max_len = 8 tokens
    out = translator.translate(["a b", "", "   ", long])
    assert out[1] == "" and out[2] == "" and translator.truncated == [3]
    translator.translate(["a b"])
    assert translator.truncated == []
    assert translator.translate([]) == []


def test_a_translator_with_a_source_cache_translates_a_batch_again_from_it(translator):
    """``Translator.prompt_cache``: the same batch again is decoded from its kept encoding, to the same text."""
    from aiayn.decoding import SourceCache

    texts = ["a b", "c d e", "f"]
    plain = translator.translate(texts)
    translator.prompt_cache = SourceCache(translator.model)
    try:
        assert translator.translate(texts) == plain == translator.translate(texts)
        assert (translator.prompt_cache.hits, translator.prompt_cache.misses) == (1, 1)
    finally:
        translator.prompt_cache = None
