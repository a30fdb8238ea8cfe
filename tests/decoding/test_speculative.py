"""Speculative greedy decoding: the main model's own greedy output, with fewer main-model passes."""

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
