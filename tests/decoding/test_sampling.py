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


def test_a_tiny_temperature_samples_the_likeliest_token_not_nan():
    """Found by fuzzing the server: temperature 2.2e-308 made the scaled logits overflow (inf, then NaN
    probabilities and a 500); it is the arg-max, as the limit of sampling at temperature -> 0."""
    from aiayn.decoding.sampling import draw

    logits = torch.tensor([[1.0, 3.0, 2.0, float("-inf")]])
    for temperature in (2.2250738585072014e-308, 1e-30):
        assert draw(logits, torch.Generator().manual_seed(0), temperature).item() == 1


def test_a_top_p_that_rounds_to_zero_keeps_the_likeliest_token():
    """Found by fuzzing the server: top_p 5e-324 is 0 in float32, and every token was dropped (NaN, a 500)."""
    from aiayn.decoding.sampling import draw

    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert draw(logits, torch.Generator().manual_seed(0), top_p=5e-324).item() == 1
