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
    with pytest.raises(ValueError, match="speculative decoding is greedy"):
        generate(model, ids, "sample", max_new_tokens=5, draft="ngram")
    with pytest.raises(ValueError, match="not a way to draft"):
        generate(model, ids, "greedy", max_new_tokens=5, draft="trigram")
