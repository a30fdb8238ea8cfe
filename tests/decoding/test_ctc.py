"""Best-path decoding of a CTC model: the collapse against written-out examples, one pass whose output is the
collapsed argmax, a batch decoded as each sentence alone, the length limit, and the refusals."""

import pytest
import torch

from aiayn import generate
from aiayn.decoding.ctc import Alignment, best_path, collapse, kept_positions
from aiayn.model.nonautoregressive import CTC
from aiayn.model.transformer import EncoderDecoder

from conftest import random_ids, tiny

B = 4  # the tiny config's <mask> id: a CTC model's blank


def test_collapse_merges_repeats_then_drops_blanks():
    assert collapse([7, 7, B, 7, 8, 8, B], B) == [7, 7, 8]  # a blank between two 7s keeps both
    assert collapse([B, B, 9, B, 9, 9, 10, B], B) == [9, 9, 10]
    assert collapse([B, B, B], B) == [] and collapse([], B) == [] and collapse([5, 6, 7], B) == [5, 6, 7]
    assert kept_positions([7, 7, B, 7, 8, 8, B], B) == [True, False, False, True, True, False, False]


def test_the_best_path_is_the_collapsed_argmax_of_one_pass():
    torch.manual_seed(0)
    model = CTC(tiny(kind="ctc", ctc_upsample=3)).eval()
    src = random_ids(2, 5, low=5)
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    found: list[Alignment] = []
    out = best_path(model, src, alignments=found)
    assert len(calls) == 1  # one decoder pass, whatever the length
    with torch.no_grad():
        logits = model(src)  # (2, 15, V)
    assert logits.shape[1] == 15
    for row in range(2):
        path = found[row].emitted
        assert len(path) == 15 and out[row] == collapse(path, B)
        allowed = logits[row].clone()
        allowed[:, [0, 1, 2]] = float("-inf")  # PAD, BOS, EOS are never emitted
        assert path == allowed.argmax(-1).tolist()
        assert [p for p, k in zip(path, found[row].kept, strict=True) if k] == out[row]


def test_a_batch_decodes_as_each_sentence_alone_and_the_limit_cuts():
    torch.manual_seed(1)
    model = CTC(tiny(kind="ctc", ctc_upsample=2)).eval()
    rows = [[9, 7, 17, 12, 5, 8], [11, 6], [30, 31, 32, 33]]
    batch = torch.zeros(3, 6, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.tensor(row)
    together = best_path(model, batch)
    alone = [best_path(model, torch.tensor([row]))[0] for row in rows]
    assert together == alone and any(together)
    cut = best_path(model, batch, max_new_tokens=torch.tensor([2, 2, 2]))
    assert cut == [row[:2] for row in together]
    assert generate(model, batch, "ctc", max_new_tokens=2) == cut


def test_strategies_and_checkpoints_must_match():
    ctc, plain = CTC(tiny(kind="ctc", ctc_upsample=2)).eval(), EncoderDecoder(tiny()).eval()
    src = random_ids(1, 4, low=5)
    with pytest.raises(ValueError, match="cannot decode a CTC checkpoint; use ctc"):
        generate(ctc, src, "greedy")
    with pytest.raises(ValueError, match="needs a CTC checkpoint"):
        generate(plain, src, "ctc")
    with pytest.raises(ValueError, match="needs a CTC checkpoint"):
        best_path(plain, src)
    with pytest.raises(TypeError, match="strategy ctc"):
        ctc.start(src, 5)
