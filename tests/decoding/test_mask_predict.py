"""Mask-Predict with a scripted CMLM (fixed probabilities per position): which tokens are re-masked at each
iteration, T = 1 as one parallel pass, the length beam's choice; and with a random CMLM, batch = alone."""


import pytest
import torch

from aiayn import generate
from aiayn.decoding.mask_predict import lowest, mask_predict
from aiayn.model.nonautoregressive import CMLM

from conftest import random_ids, tiny

FIRST = 5  # the first ordinary token id


class ScriptedCMLM(CMLM):
    """Position j of a row of real length L predicts token FIRST + j with probability ``sure(L, j)`` (the rest
    spread evenly over the other ordinary tokens); the length scores are ``length_scores``."""

    def __init__(self, sure, length_scores: list[float]) -> None:
        super().__init__(tiny(vocab_size=16, kind="cmlm"))
        self.sure, self.scores, self.calls = sure, torch.tensor(length_scores), 0

    def encode(self, src_ids, need_weights=False):
        return torch.zeros(src_ids.size(0), src_ids.size(1), self.config.d_model)

    def length_logits(self, memory, src_mask=None):
        return self.scores.expand(memory.size(0), -1).clone()

    def decode_all(self, tgt_ids, memory, src_mask=None):
        self.calls += 1
        n, width, vocab = *tgt_ids.shape, self.config.vocab_size
        probs = torch.zeros(n, width, vocab)
        for i, row in enumerate(tgt_ids.tolist()):
            length = sum(t != self.config.pad_id for t in row)
            for j in range(width):
                p = self.sure(length, j)
                probs[i, j, FIRST:] = (1 - p) / (vocab - FIRST - 1)
                probs[i, j, FIRST + j % (vocab - FIRST)] = p
        return probs.clamp(min=1e-12).log()


def lengths_preferring(*lengths: int, size: int = 12) -> list[float]:
    scores = [-10.0] * size
    for rank, length in enumerate(lengths):
        scores[length] = -float(rank)
    return scores


SURE = [0.9, 0.3, 0.8, 0.3, 0.6, 0.95]


def test_each_iteration_re_masks_exactly_the_n_least_sure_earlier_first_on_ties():
    model = ScriptedCMLM(lambda length, j: SURE[j], lengths_preferring(6))
    history = []
    (out,) = mask_predict(model, torch.tensor([[7, 8]]), iterations=6, length_beam=1, history=history)
    assert out == [FIRST + j for j in range(6)] and model.calls == 6
    steps = history[0]
    assert steps[0].predicted == [True] * 6  # the first pass predicts everything
    order = [1, 3, 4, 2, 0, 5]  # by probability, ties (positions 1 and 3, both 0.3) the earlier first
    for t in range(1, 6):
        n = 6 * (6 - t) // 6
        assert [j for j, m in enumerate(steps[t].predicted) if m] == sorted(order[:n]), t
    assert steps[-1].probabilities == pytest.approx(SURE)


def test_lowest_picks_by_rank_and_never_padding():
    logp = torch.tensor([[-1.0, -3.0, -2.0, -3.0, 0.0]])
    real = torch.tensor([[True, True, True, True, False]])
    assert lowest(logp, real, torch.tensor([2])).tolist() == [[False, True, False, True, False]]
    assert lowest(logp, real, torch.tensor([9])).tolist() == [[True, True, True, True, False]]


def test_one_iteration_is_a_single_parallel_pass():
    model = ScriptedCMLM(lambda length, j: 0.5, lengths_preferring(4))
    history = []
    mask_predict(model, torch.tensor([[7, 8, 9]]), iterations=1, length_beam=1, history=history)
    assert model.calls == 1 and len(history[0]) == 1 and history[0][0].predicted == [True] * 4


def test_the_length_beam_keeps_the_best_average_log_probability():
    # length 3 is the likeliest; by the tokens' average log-probability length 5 wins (log 0.6 > log 0.5 > log
    # 0.45), by their sum length 3 would (3 log 0.5 = -2.08 > 5 log 0.6 = -2.55 > 4 log 0.45 = -3.19)
    sure = {3: 0.5, 5: 0.6, 4: 0.45}
    model = ScriptedCMLM(lambda length, j: sure[length], lengths_preferring(3, 5, 4))
    (best,) = mask_predict(model, torch.tensor([[7, 8]]), iterations=2, length_beam=3)
    assert len(best) == 5
    (alone,) = mask_predict(model, torch.tensor([[7, 8]]), iterations=2, length_beam=1)
    assert len(alone) == 3  # one length: the likeliest


@pytest.fixture(scope="module")
def cmlm():
    torch.manual_seed(4)
    return CMLM(tiny(vocab_size=30, kind="cmlm")).double().eval()


def test_a_batch_equals_each_sentence_alone_and_padding_never_leaks(cmlm):
    sources = [random_ids(1, n, vocab=30) for n in (3, 8, 5)]
    batch = torch.full((3, 8), cmlm.config.pad_id)
    for i, src in enumerate(sources):
        batch[i, : src.size(1)] = src[0]
    together = mask_predict(cmlm, batch, iterations=4, length_beam=3)
    assert together == [mask_predict(cmlm, src, iterations=4, length_beam=3)[0] for src in sources]
    assert all(len(out) >= 1 and cmlm.config.mask_id not in out for out in together)


def test_generate_decodes_a_cmlm_with_mask_predict_only(cmlm):
    src = random_ids(2, 5, vocab=30)
    out = generate(cmlm, src, "mask-predict", iterations=3, length_beam=2, max_new_tokens=4)
    assert out == mask_predict(cmlm, src, 3, 2, torch.tensor([4, 4])) and all(len(o) <= 4 for o in out)
    with pytest.raises(ValueError, match="strategy: greedy cannot decode a CMLM checkpoint; use mask-predict"):
        generate(cmlm, src, "greedy", max_new_tokens=4)
