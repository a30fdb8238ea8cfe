"""Prompt (prefix) caching: a stored prefix's keys/values give identical outputs."""

import torch

from aiayn.decoding import greedy_search

from conftest import random_ids, tiny


def test_prompt_cache_reuses_a_prefix_with_identical_outputs():
    from aiayn import DecoderOnly
    from aiayn.decoding import PromptCache

    torch.manual_seed(2)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()
    system = random_ids(1, 6, vocab=30)[0].tolist()
    store = PromptCache(lm)
    store.add(system)
    for _ in range(3):
        prompt = torch.tensor([system + random_ids(1, 3, vocab=30)[0].tolist()])
        assert greedy_search(lm, prompt, 8, prompt_cache=store) == greedy_search(lm, prompt, 8)
    assert store.hits == 3
