"""Sampling: top-k 1 is greedy, seeds repeat, top-k / top-p filters keep the right tokens."""

import json

import pytest
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


def test_min_p_keeps_the_tokens_at_least_that_fraction_as_likely_as_the_likeliest():
    from aiayn.decoding import filter_logits

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = filter_logits(logits, min_p=0.2).softmax(-1)[0]  # kept: p >= 0.1
    assert torch.allclose(probs, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    # min-p comes after the temperature (Hugging Face's order): at T = 2 the probabilities are sqrt(p) / sum
    flat = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    probs = filter_logits(logits, temperature=2.0, min_p=0.5).softmax(-1)[0]  # kept: sqrt(p) >= 0.5 sqrt(0.5)
    kept = flat >= 0.5 * flat[0]
    assert kept.tolist() == [True, True, True, False]
    assert torch.allclose(probs, torch.where(kept, flat, 0) / flat[kept].sum())


def test_penalties_lower_the_scores_of_seen_tokens_as_written_out():
    from aiayn.decoding.sampling import Penalties

    prompts = torch.tensor([[3, 1, 0], [2, 0, 0]])  # 0: padding, not seen
    pen = Penalties(prompts, pad_id=0, vocab=5, repetition=2.0, frequency=0.5, presence=0.25)
    pen.take(torch.tensor([4, 4]), torch.tensor([True, False]))  # row 1 had finished: nothing counted
    pen.take(torch.tensor([4, 1]), torch.tensor([True, True]))
    scores = torch.tensor([[1.0, 2.0, -1.0, -2.0, 4.0], [1.0, 2.0, -1.0, -2.0, 4.0]])
    want = torch.tensor([
        [1.0, 2.0 / 2, -1.0, -2.0 * 2, 4.0 / 2 - 0.5 * 2 - 0.25],  # 1, 3: prompt; 4: generated twice
        [1.0, 2.0 / 2 - 0.5 - 0.25, -1.0 * 2, -2.0, 4.0],  # 2: prompt; 1: generated once
    ])
    assert torch.equal(pen.apply(scores.clone()), want)
    assert torch.equal(pen.apply(scores[:, [4, 0]].clone(), torch.tensor([4, 0])), want[:, [4, 0]])  # a shortlist


def test_a_repetition_penalty_near_zero_samples_without_overflow():
    """A repetition penalty the checks allow (any in (0, 10]), so small that a seen token's score over it is past
    float's range: the score stays finite (the largest float), and sampling draws (before: an inf, then NaN
    probabilities, and a server's 500)."""
    from aiayn import DecoderOnly, generate

    from conftest import tiny

    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).eval()
    out = generate(lm, torch.tensor([[5, 6, 7]]), "sample", temperature=1.0, seed=1, max_new_tokens=8,
                   min_new_tokens=8, repetition_penalty=1e-300)[0]
    assert len(out) == 8


def test_greedy_with_penalties_takes_the_best_penalised_token_at_every_step():
    """Replayed without a cache: every step's token is the arg-max of the model's scores, penalised by hand."""
    from aiayn import DecoderOnly, generate

    from conftest import tiny

    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()
    prompt = torch.tensor([[5, 6, 7, 5]])
    plain = generate(lm, prompt, "greedy", max_new_tokens=12)[0]
    out = generate(lm, prompt, "greedy", max_new_tokens=12, repetition_penalty=1.5, presence_penalty=0.5,
                   frequency_penalty=0.3)[0]
    assert out != plain
    seen = prompt[0].tolist()
    for token in out:
        with torch.no_grad():
            scores = lm(torch.tensor([seen]))[0, -1].clone()
        scores[lm.config.pad_id] = float("-inf")
        generated = seen[prompt.size(1):]
        for t in set(seen):
            scores[t] = scores[t] / 1.5 if scores[t] > 0 else scores[t] * 1.5
        for t in set(generated):
            scores[t] -= 0.3 * generated.count(t) + 0.5
        assert int(scores.argmax()) == token
        seen.append(token)


def test_logit_bias_is_added_first_then_the_penalties_and_a_shortlist_takes_its_columns():
    from aiayn.decoding.sampling import Penalties

    prompts = torch.tensor([[3, 0], [3, 4]])  # row 0: [3], then padding (masks.prompt_lengths)
    pen = Penalties(prompts, pad_id=0, vocab=5, repetition=2.0, bias={3: 4.0, 1: -100.0})
    assert pen.seen[:, [0, 3, 4]].tolist() == [[False, True, False], [False, True, True]]
    pen.seen, pen.counts = pen.seen[:1], pen.counts[:1]  # row 0 alone below
    scores = torch.tensor([[1.0, 2.0, -1.0, -2.0, 4.0]])
    want = torch.tensor([[1.0, 2.0 - 100.0, -1.0, (-2.0 + 4.0) / 2, 4.0]])  # 3: biased, then seen in the prompt
    assert torch.equal(pen.apply(scores.clone()), want)
    assert torch.equal(pen.apply(scores[:, [3, 1]].clone(), torch.tensor([3, 1])), want[:, [3, 1]])


def test_greedy_and_sampling_with_a_logit_bias_take_the_biased_scores_at_every_step():
    """Replayed without a cache: every greedy token is the arg-max of the model's scores with the bias added; a
    sampled text under a ban never has the banned tokens, and a seed repeats it; the dict and its text are one."""
    from aiayn import DecoderOnly, generate

    from conftest import tiny

    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()
    prompt = torch.tensor([[5, 6, 7, 5]])
    plain = generate(lm, prompt, "greedy", max_new_tokens=12)[0]
    bias = {plain[0]: -5.0, plain[1]: -100.0, 9: 1.5}
    out = generate(lm, prompt, "greedy", max_new_tokens=12, logit_bias=bias)[0]
    assert out != plain and out == generate(lm, prompt, "greedy", max_new_tokens=12,
                                            logit_bias=json.dumps({str(k): v for k, v in bias.items()}))[0]
    seen = prompt[0].tolist()
    for token in out:
        with torch.no_grad():
            scores = lm(torch.tensor([seen]))[0, -1].clone()
        scores[lm.config.pad_id] = float("-inf")
        for t, b in bias.items():
            scores[t] += b
        assert int(scores.argmax()) == token
        seen.append(token)
    banned = {t: -100.0 for t in range(4, 20)}
    sampled = generate(lm, prompt, "sample", temperature=1.0, seed=4, max_new_tokens=30, logit_bias=banned)[0]
    assert not set(sampled) & set(banned)
    assert sampled == generate(lm, prompt, "sample", temperature=1.0, seed=4, max_new_tokens=30, logit_bias=banned)[0]


def test_penalties_are_refused_where_they_have_no_meaning(model):
    from aiayn import generate

    src = random_ids(1, 5, vocab=30)
    with pytest.raises(ValueError, match="repetition_penalty"):
        generate(model, src, "beam", repetition_penalty=1.2, max_new_tokens=4)
    with pytest.raises(ValueError, match="logit_bias: a bias is for greedy or sampled decoding, not beam"):
        generate(model, src, "beam", logit_bias={5: 1.0}, max_new_tokens=4)
    with pytest.raises(ValueError, match="logit_bias: token id 30 is not in the model's vocabulary of 30"):
        generate(model, src, "greedy", logit_bias={30: 1.0}, max_new_tokens=4)


@pytest.mark.parametrize("nucleus", ["a few tokens", "hundreds", "thousands"])
def test_top_p_keeps_what_sorting_the_whole_vocabulary_keeps(nucleus):
    """top_p_filter ranks the likeliest 64, then 1,024 tokens, then sorts everything: each way keeps exactly the
    set the reference (top_p_sorted) keeps, row by row, with -inf scores (a top-k before it) among them."""
    from aiayn.decoding.sampling import top_p_filter, top_p_sorted

    g = torch.Generator().manual_seed(3)
    spread = {"a few tokens": 6.0, "hundreds": 3.5, "thousands": 0.3}[nucleus]
    logits = torch.randn(6, 20_000, generator=g) * spread  # (B, V)
    logits[0, :5_000] = float("-inf")
    sizes = []
    for top_p in (1e-9, 0.5, 0.9, 0.99):
        ours, reference = top_p_filter(logits, top_p), top_p_sorted(logits, top_p)
        assert torch.equal(ours, reference)
        sizes.append(int(torch.isfinite(reference).sum(-1).max()))
    low, high = {"a few tokens": (1, 64), "hundreds": (65, 1024), "thousands": (1025, 20_000)}[nucleus]
    assert low <= sizes[2] <= high  # top_p 0.9 took the path this case is for
    assert sizes[0] == 1  # a top_p under every probability keeps the likeliest token alone


def test_a_draw_over_the_tokens_left_follows_the_filtered_distribution_row_by_row():
    """Where the filters leave few tokens, draw samples among them alone: each row's frequencies match its own
    filtered softmax (10,000 draws a row: within 0.02, over 4 standard deviations), nothing filtered out is ever
    drawn, and a seed repeats its draws."""
    from aiayn.decoding.sampling import draw

    logits = torch.linspace(-20.0, -10.0, 1000).repeat(2, 1)  # (2, 1000), every score distinct
    logits[0, [10, 500, 999]] = torch.tensor([2.0, 1.0, 0.0])  # row 0: these three and the two best of the rest
    logits[1, [3, 7, 11, 13, 17]] = torch.tensor([0.5, 0.4, 0.3, 0.2, 0.1])  # row 1: these five
    rows = logits.repeat(10_000, 1)  # (20,000, 1000): each row drawn 10,000 times
    picks = draw(rows, torch.Generator().manual_seed(0), top_k=5).view(10_000, 2)  # (10,000, 2)
    assert torch.equal(picks, draw(rows, torch.Generator().manual_seed(0), top_k=5).view(10_000, 2))
    for row in range(2):
        top = logits[row].topk(5)
        expected = torch.zeros(1000).index_put_((top.indices,), top.values.softmax(-1))  # (1000,)
        seen = torch.bincount(picks[:, row], minlength=1000).float() / 10_000
        assert set(picks[:, row].tolist()) <= set(top.indices.tolist())
        assert (seen - expected).abs().max() < 0.02
