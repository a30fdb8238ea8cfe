"""A sliding layer's KV cache is a ring of its window (``model/cache.py``): decoding far past it (greedy, beam,
sampling; rows joining a running batch; prompt caching; speculative decoding) gives exactly what recomputing the
whole prefix gives, while the sliding layers hold ``window + ROLLBACK`` positions however long the text."""

import pytest
import torch

from aiayn import DecoderOnly, generate
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.engine import Engine
from aiayn.decoding.generation import rows_for
from aiayn.model.kv_cache import ROLLBACK

from conftest import random_ids, tiny

WINDOW, NEW = 3, 40  # 40 new tokens: twice round a ring of 3 + 16 slots
CONFIGS = [DecodingConfig(strategy="greedy", min_new_tokens=NEW, max_new_tokens=NEW, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=2, min_new_tokens=30, max_new_tokens=30, max_len_b=None),
           DecodingConfig(strategy="sample", seed=3, min_new_tokens=35, max_new_tokens=35, max_len_b=None)]


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(7)
    cfg = tiny(arch="decoder-only", vocab_size=30, positions="rope", n_decoder_layers=3, max_len=128,
               layer_types=["sliding", "full", "sliding"], sliding_window=WINDOW)
    return DecoderOnly(cfg).double().eval()


def test_the_sliding_layers_hold_their_window_and_the_full_layers_everything(lm):
    cache = lm.new_cache(2, 100, torch.zeros(1))
    assert [la.self_kv.capacity for la in cache.layers] == [WINDOW + ROLLBACK, 100, WINDOW + ROLLBACK]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.strategy)
def test_decoding_past_the_ring_equals_recomputing_every_position(lm, cfg):
    prompts = torch.cat([random_ids(1, 12, vocab=30), torch.cat([random_ids(1, 5, vocab=30),
                                                                  torch.zeros(1, 7, dtype=torch.long)], 1)])
    cached = generate(lm, prompts, config=cfg)
    assert cached == generate(lm, prompts, config=cfg, use_cache=False)
    if cfg.strategy != "sample":  # (a sampled row's draws depend on the rows beside it)
        assert cached[1] == generate(lm, prompts[1:, :5], config=cfg)[0]  # the padded row as alone
    assert len(cached[0]) > WINDOW + ROLLBACK


def test_rows_joining_a_running_batch_keep_their_rings(lm):
    """Rows join after others went round their rings (the rings are re-laid for the new columns) and leave
    (the common padding dropped): each decodes what it decodes alone."""
    torch.manual_seed(1)
    prompts = [random_ids(1, n, vocab=30) for n in (4, 25, 9)]
    engine, groups = Engine(lm, capacity=120), []
    for prompt, cfg in zip(prompts, CONFIGS, strict=True):
        group, rows, beams = rows_for(lm, prompt, cfg)
        engine.admit(group, rows, beams)
        groups.append((group, cfg))
        for _ in range(11):
            engine.step()
            engine.remove_done()
    engine.run()
    for (group, cfg), prompt in zip(groups, prompts, strict=True):
        out = [h[0].tokens for h in group.nbest()] if cfg.strategy == "beam" else group.results()
        assert out == generate(lm, prompt, config=cfg), cfg.strategy


def test_a_prompt_cache_longer_than_the_ring_is_reused_with_identical_outputs(lm):
    from aiayn.decoding import PromptCache

    system = random_ids(1, 30, vocab=30)[0].tolist()  # longer than a ring: its early blocks lose the sliding layers
    store = PromptCache(lm, block_size=4)
    store.add(system)
    assert any(kv is None for kv in store.blocks[store.key(system[:4])])  # a block the rings no longer held
    assert all(kv is not None for kv in store.blocks[store.key(system[:28])])  # the last: every layer
    for _ in range(2):
        prompt = torch.tensor([system + random_ids(1, 3, vocab=30)[0].tolist()])
        assert generate(lm, prompt, config=CONFIGS[0], prompt_cache=store) == generate(lm, prompt, config=CONFIGS[0])
    assert store.hits == 2 and store.hit_tokens == 28 + 28 + 2  # the second also the first's block past 28, in part
    longer = PromptCache(lm, block_size=4)
    longer.add(system + random_ids(1, 30, vocab=30)[0].tolist())  # the system prompt's end: out of the rings
    prompt = torch.tensor([system + random_ids(1, 3, vocab=30)[0].tolist()])
    for hits in (0, 1):  # the first finds blocks the rings cannot use, and stores fuller ones the second uses
        assert generate(lm, prompt, config=CONFIGS[0], prompt_cache=longer) == generate(lm, prompt, config=CONFIGS[0])
        assert longer.hits == hits


def test_speculative_decoding_rolls_the_rings_back(lm):
    torch.manual_seed(2)
    draft = DecoderOnly(lm.config).double().eval()  # another random model: most drafts are rejected
    prompt = random_ids(1, 6, vocab=30)
    cfg = CONFIGS[0]
    assert generate(lm, prompt, config=cfg, draft_model=draft) == generate(lm, prompt, config=cfg)
