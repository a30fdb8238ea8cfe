"""Beam search: checked token by token and score by score on a scripted model; invariances."""

import math

import pytest
import torch

from aiayn.decoding import beam_search, greedy_search
from aiayn.decoding.beam import gnmt_penalty

from conftest import A, B, ScriptedModel, random_ids


def test_scripted_beam_search_hypotheses_and_scores():
    src = torch.tensor([[7, 7]])
    (nbest,) = beam_search(ScriptedModel(), src, beam_size=2, max_new_tokens=5, length_penalty=1.0, use_cache=False)
    assert [h.tokens for h in nbest] == [[B], [A, B]]
    assert nbest[0].logprob == pytest.approx(math.log(0.4 * 0.9))
    assert nbest[0].score == pytest.approx(math.log(0.36) / gnmt_penalty(2, 1.0))
    assert nbest[1].logprob == pytest.approx(math.log(0.6 * 0.5))
    assert nbest[1].score == pytest.approx(math.log(0.30) / ((5 + 3) / 6))


def test_scripted_min_length_and_max_length():
    # EOS is forbidden for 2 steps: after (B,) the best non-EOS continuations are A/B at 0.05.
    (nbest,) = beam_search(ScriptedModel(), torch.tensor([[7]]), 2, 5, min_new_tokens=2, length_penalty=0.0,
                           use_cache=False)
    assert all(len(h.tokens) >= 2 for h in nbest) and nbest[0].tokens == [A, B]
    (cut,) = beam_search(ScriptedModel(), torch.tensor([[7]]), 2, 1, length_penalty=0.0, use_cache=False)
    assert sorted(h.tokens for h in cut) == [[A], [B]]


def test_beam_size_one_equals_greedy(model):
    src = random_ids(6, 7, vocab=30)
    greedy = greedy_search(model, src, 12)
    beam = [h[0].tokens for h in beam_search(model, src, beam_size=1, max_new_tokens=12, length_penalty=0.0)]
    assert beam == greedy


@pytest.mark.parametrize("use_beam", [False, True])
def test_batch_invariance_and_cache_invariance(model, use_beam):
    torch.manual_seed(5)
    lengths = [3, 9, 5, 7]
    rows = [random_ids(1, n, vocab=30)[0].tolist() for n in lengths]
    padded = torch.zeros(4, 9, dtype=torch.long)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = torch.tensor(r)

    def run(src, use_cache=True):
        if use_beam:
            return [h[0].tokens for h in beam_search(model, src, 3, 10, use_cache=use_cache)]
        return greedy_search(model, src, 10, use_cache=use_cache)

    together = run(padded)
    assert together == [run(torch.tensor([r]))[0] for r in rows]
    assert together == run(padded, use_cache=False)
