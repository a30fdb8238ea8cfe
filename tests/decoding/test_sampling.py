"""Sampling: top-k 1 is greedy, seeds repeat, top-k / top-p filters keep the right tokens."""

import torch

from conftest import random_ids


def test_top_k_one_equals_greedy_and_seeds_repeat(model):
    from aiayn import generate

    src = random_ids(4, 6, vocab=30)
    greedy = generate(model, src, "greedy", max_new_tokens=10)
    assert generate(model, src, "sample", top_k=1, seed=1, max_new_tokens=10) == greedy
    a = generate(model, src, "sample", seed=7, num_return_sequences=3, max_new_tokens=10, temperature=2.0)
    b = generate(model, src, "sample", seed=7, num_return_sequences=3, max_new_tokens=10, temperature=2.0)
    c = generate(model, src, "sample", seed=8, num_return_sequences=3, max_new_tokens=10, temperature=2.0)
    assert a == b and a != c and len(a) == 12


def test_filter_logits_top_k_and_top_p():
    from aiayn.decoding import filter_logits

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)[0, 2:]).all()
    kept = torch.isfinite(filter_logits(logits, top_p=0.8))[0].tolist()
    assert kept == [True, True, False, False]  # 0.5 + 0.3 reaches 0.8
    assert torch.isfinite(filter_logits(logits, top_p=0.5))[0].tolist() == [True, False, False, False]
