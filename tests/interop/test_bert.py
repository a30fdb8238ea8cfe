"""Importing Hugging Face BERT (``BertForMaskedLM``): logits, fill-mask top-5 and WordPiece ids equal to
the Hugging Face model's."""

import pytest
import torch

from aiayn.cli import main
from aiayn.inference.fill_mask import MaskFiller

SENTENCES = ["A man rides a horse.", "Zwei Hunde spielen im Schnee!", "一个男人骑着马。", "Children LAUGH , dogs play",
             "Ünïcödé unknown words", ""]


@pytest.fixture(scope="module")
def imported(bert, import_hf):
    return import_hf(bert[0])


def test_wordpiece_ids_equal_hugging_face(bert, imported, same_ids):
    (_, tokenizers), _ = imported
    same_ids(tokenizers.src, tokenizers.src, bert[2], SENTENCES)  # [CLS] ... [SEP] included


def test_logits_equal_on_a_padded_batch(bert, imported):
    _, hf, tok = bert
    (model, _), _ = imported
    batch = tok(SENTENCES[:4], return_tensors="pt", padding=True)
    real = batch.attention_mask.bool()
    assert not real.all()
    with torch.no_grad():
        ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        ours = model.eval()(batch.input_ids)
    assert (ref - ours)[real].abs().max() <= 1e-4


def test_fill_mask_top5_equals_hugging_face(bert, imported, capsys):
    _, hf, tok = bert
    _, folder = imported
    text = "a man <mask> a horse . two <mask> play"
    masks = MaskFiller.from_checkpoint(folder).fill(text, top_k=5)
    batch = tok(text.replace("<mask>", tok.mask_token), return_tensors="pt")
    with torch.no_grad():
        logits = hf(**batch).logits[0]
    logits[:, tok.all_special_ids] = float("-inf")  # aiayn never proposes a special token
    probs = logits[batch.input_ids[0] == tok.mask_token_id].softmax(-1)
    top = probs.topk(5)
    assert len(masks) == 2
    for cands, ids, ps in zip(masks, top.indices.tolist(), top.values.tolist(), strict=True):
        assert [c.token_id for c in cands] == ids
        assert [c.probability for c in cands] == pytest.approx(ps, abs=1e-5)
        assert [c.token for c in cands] == [tok.decode([i]) for i in ids]
    assert main(["fill-mask", "--checkpoint", str(folder), text]) == 0
    assert tok.decode([top.indices[0, 0]]) in capsys.readouterr().out
