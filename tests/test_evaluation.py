"""Scoring: sacreBLEU and chrF with their signatures."""

import pytest

from aiayn.evaluation import score


def test_scores_and_signatures():
    perfect = score(["the cat sat on the mat ."], ["the cat sat on the mat ."])
    assert perfect.bleu == pytest.approx(100.0) and perfect.chrf == pytest.approx(100.0)
    assert "tok:13a" in perfect.bleu_signature and "nrefs:1" in perfect.bleu_signature
    partial = score(["the cat sat on a mat"], ["the cat sat on the mat"])
    assert 0 < partial.bleu < 100 and 0 < partial.chrf < 100
    assert "tok:zh" in score(["我爱你"], ["我爱你"], "zh").bleu_signature
    assert set(partial.to_dict()) == {"bleu", "chrf", "bleu_signature", "chrf_signature"}
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        score(["a"], ["a", "b"])


def test_tokenized_bleu_is_the_papers_protocol():
    from aiayn.evaluation import tokenized_bleu

    assert tokenized_bleu(["Das ist ein gut-bekanntes Haus."], ["Das ist ein gut-bekanntes Haus."], "de") == \
        pytest.approx(100.0)
    hyp = ["wir sahen heute ein weithin gut-bekanntes Haus am Fluss und gingen dann nach Hause ."]
    ref = ["wir sahen heute ein weithin gut-gebautes Haus am Fluss und gingen dann nach Hause ."]
    # 13a keeps "gut-bekanntes" whole; the paper's protocol splits compounds, so "gut" and "-" match
    assert tokenized_bleu(hyp, ref, "de") > score(hyp, ref).bleu
    # Moses separates the final period from the word; 13a does too, so a clean sentence scores alike
    assert tokenized_bleu(["ein Haus."], ["ein Haus."], "de") == pytest.approx(score(["ein Haus."], ["ein Haus."]).bleu)


def test_lowercase_scores_ignore_case_and_say_so():
    from aiayn.evaluation import tokenized_bleu

    hyp, ref = ["A Man Rides A Bike Down The Street ."], ["a man rides a bike down the street ."]
    assert score(hyp, ref).bleu < 50 and "case:mixed" in score(hyp, ref).bleu_signature
    lower = score(hyp, ref, lowercase=True)
    assert lower.bleu == pytest.approx(100.0) and lower.chrf == pytest.approx(100.0)
    assert "case:lc" in lower.bleu_signature
    assert tokenized_bleu(hyp, ref, "en") < 50
    assert tokenized_bleu(hyp, ref, "en", lowercase=True) == pytest.approx(100.0)
