"""SentencePiece tokenizers: fixed special ids, joint/separate, Chinese, round trips, save/load."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.model.config import MASK_ID, SPECIAL_IDS
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer, load_tokenizers

EN = ["A man is riding a bicycle.", "Two dogs play in the snow.", "The woman reads a book in the park."] * 20
ZH = ["我是一个学生。", "你好，世界！", "他们在公园里看书。", "今天天气很好。"] * 20


@pytest.fixture(scope="module")
def tok():
    return SentencePieceTokenizer.train(EN + ZH, vocab_size=400)


def test_special_ids_are_fixed(tok):
    assert [tok.sp.id_to_piece(i) for i in SPECIAL_IDS.values()] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tok.sp.id_to_piece(MASK_ID) == "<mask>"
    assert min(tok.encode("A man reads.")) > MASK_ID


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_both_model_types_round_trip_chinese_and_english(model_type):
    t = SentencePieceTokenizer.train(EN + ZH, vocab_size=400, model_type=model_type)
    for text in ("你好，世界！", "I am a student", "我是一个学生"):
        assert t.decode(t.encode(text)) == text


def test_joint_and_separate_pairs_save_and_load(tmp_path):
    joint = SentencePiecePair.train(EN, ZH, vocab_size=400, joint=True)
    assert joint.joint
    joint.save(tmp_path)
    again = load_tokenizers(tmp_path)
    assert again.joint and again.src.encode("你好") == joint.src.encode("你好")
    separate = SentencePiecePair.train(EN, ZH, vocab_size=350, joint=False)
    assert not separate.joint
    separate.save(tmp_path / "sep")
    loaded = load_tokenizers(tmp_path / "sep")
    assert loaded.tgt.encode("世界") == separate.tgt.encode("世界") and not loaded.joint


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="bpe or unigram"):
        SentencePieceTokenizer.train(EN, model_type="word")
    with pytest.raises(ValueError, match="vocab-size"):
        SentencePieceTokenizer.train(EN + ZH, vocab_size=50)
    with pytest.raises(ValueError, match="no text"):
        SentencePieceTokenizer.train(["", "  "])


# "\u2581" is SentencePiece's own word-boundary symbol; it reads back as a space, by design.
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\u2581")))
def test_round_trip_arbitrary_unicode(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_bpe_dropout_samples_other_segmentations_of_the_same_text():
    t = SentencePieceTokenizer.train(EN, vocab_size=300)
    plain = t.encode_batch(EN)
    assert t.encode_batch(EN, dropout=0.0) == plain
    a, b = t.encode_batch(EN, dropout=0.3), t.encode_batch(EN, dropout=0.3)
    assert a != b and a != plain  # a new sample each call (60 sentences: equal samples are vanishingly rare)
    assert [t.decode(ids) for ids in a] == EN  # another segmentation of the same text
    assert sum(map(len, a)) > sum(map(len, plain))  # skipped merges leave smaller pieces
