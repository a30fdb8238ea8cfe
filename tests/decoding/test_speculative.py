"""Speculative greedy decoding: the main model's own greedy output, with fewer main-model passes."""

import pytest
import torch

from aiayn.decoding import greedy_search

from conftest import random_ids, tiny, train_reverse


def test_speculative_greedy_equals_plain_greedy():
    from aiayn.decoding import speculative_greedy

    main = train_reverse(tiny(vocab_size=20), 300)
    draft = train_reverse(tiny(vocab_size=20, d_model=32, n_encoder_layers=1, n_decoder_layers=1), 150)
    src = random_ids(40, 8, vocab=20)
    src[::3, 5:] = 0  # some shorter sources
    outputs, stats = speculative_greedy(main, draft, src, max_new_tokens=12, k=4)
    assert outputs == greedy_search(main, src, 12)
    assert stats.main_passes < 40 * 12 and 0 < stats.acceptance_rate <= 1
    # every pass yields the accepted drafted tokens plus the main model's own next one (cut at the limit)
    assert stats.main_passes <= stats.generated <= stats.accepted + stats.main_passes
    assert stats.generated >= sum(len(o) for o in outputs) and stats.tokens_per_main_pass > 1
    limits = torch.randint(0, 12, (40,))
    outputs, _ = speculative_greedy(main, draft, src, max_new_tokens=limits, k=3)
    assert outputs == greedy_search(main, src, limits)


def test_a_language_model_drafted_by_prompt_lookup_or_its_own_int8_copy_decodes_as_plain_greedy(lm_run):
    """The trained character LM (a repeated text: prompt lookup drafts well) through ``generate(draft=...)``:
    greedy output token for token, streamed as it is kept, with fewer passes than tokens; a draft model that is
    another, random model (rarely right) changes nothing either."""
    from aiayn import generate
    from aiayn.decoding import SpeculativeStats
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import quantize

    model, tokenizers = load_checkpoint(lm_run)
    prompts = ["the cat sat on the mat . a dog ran", "a dog ran in the park 3 .\nthe cat"]
    for prompt in prompts:
        ids = torch.tensor([tokenizers.src.encode(prompt)])
        plain = generate(model, ids, "greedy", max_new_tokens=60)
        for draft in ("ngram", quantize(model, bits=8), type(model)(model.config).eval()):
            stats, streamed = SpeculativeStats(), []
            got = generate(model, ids, "greedy", max_new_tokens=60, draft=draft, speculative_stats=stats,
                           on_token=lambda next_ids, live, seen=streamed: seen.extend(next_ids[live].tolist()))
            assert got == plain, (prompt, draft)
            assert streamed == plain[0][: len(streamed)] and len(streamed) == len(plain[0])
            assert stats.main_passes <= stats.generated
        assert stats.acceptance_rate < 0.5  # the random draft: few accepted
    stats = SpeculativeStats()
    generate(model, ids, "greedy", max_new_tokens=60, draft="ngram", speculative_stats=stats)
    assert stats.tokens_per_main_pass > 1.5  # the repeated text: several tokens a pass
    with pytest.raises(ValueError, match="speculative decoding is greedy or sampled"):
        generate(model, ids, "beam", beam_size=2, max_new_tokens=5, draft="ngram")
    with pytest.raises(ValueError, match="not a way to draft"):
        generate(model, ids, "greedy", max_new_tokens=5, draft="trigram")


@pytest.mark.parametrize("draft_kind", ["model", "lookup"])
def test_speculative_sampling_draws_the_first_tokens_as_plain_sampling_does(draft_kind):
    """Chen et al.'s rule keeps the distribution: a random language model's first two tokens after a prompt,
    drawn 1,500 times through speculative sampling (temperature 1.3, top-k 12), are distributed as the model's own
    filtered softmax says, the second given the first (a chi-square test over the pairs). The draft is another
    random model, or prompt lookup over a prompt that repeats, each far from the main model: keeping every drafted
    token (the rule broken) fails the same test."""
    import scipy.stats

    from aiayn import DecoderOnly, generate
    from aiayn.decoding.core import forbid
    from aiayn.decoding.sampling import filter_logits

    torch.manual_seed(0)
    config = tiny(arch="decoder-only", vocab_size=16, positions="rope", max_len=64)
    main, other = DecoderOnly(config).eval(), DecoderOnly(config).eval()
    prompt = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    draft = other if draft_kind == "model" else "ngram"
    with torch.no_grad():  # padding and (min_new_tokens) the end never drawn, then the filters
        first = filter_logits(forbid(main.decode(prompt)[0, -1:], config, True), 1.3, 12).softmax(-1)[0]  # (V,)
        seconds = main.decode(torch.cat([prompt.expand(16, -1), torch.arange(16)[:, None]], 1))[:, -1]  # (V, V)
        after = filter_logits(forbid(seconds, config, True), 1.3, 12).softmax(-1)  # the second given each first
    expected = first[:, None] * after  # (V, V) pairs
    draws = torch.zeros(16, 16)
    for seed in range(1500):
        out = generate(main, prompt, "sample", max_new_tokens=2, temperature=1.3, top_k=12, seed=seed,
                       draft=draft, draft_tokens=2, min_new_tokens=2)[0]
        draws[out[0], out[1]] += 1
    cells = expected * 1500 > 5  # the pairs with enough expected draws, the rest pooled
    observed = torch.cat([draws[cells], draws[~cells].sum()[None]])
    wanted = torch.cat([expected[cells] * 1500, (expected[~cells] * 1500).sum()[None]])
    chi2 = float(((observed - wanted) ** 2 / wanted).sum())
    p_value = float(scipy.stats.chi2.sf(chi2, observed.numel() - 1))
    assert p_value > 1e-4, (chi2, observed.numel(), p_value)  # a broken rule: p below 1e-11
