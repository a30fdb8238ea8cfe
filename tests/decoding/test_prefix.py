"""Prompt (prefix) caching: the stored blocks of a prefix give identical outputs, whole blocks only, under a
byte cap."""

import torch

from aiayn.decoding import greedy_search

from conftest import random_ids, tiny


def _lm():
    from aiayn import DecoderOnly

    torch.manual_seed(2)
    return DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()


def test_a_blocks_key_stands_for_every_token_up_to_its_end():
    """A block's key is chained from the keys before it: the same tokens after another prefix are another key, the
    same prefix is the same key, and only whole blocks have one."""
    from aiayn.decoding.prefix import keys_of

    first, other = list(keys_of([1, 2, 3, 4, 5, 6, 7, 8, 9], 9, 4)), list(keys_of([0, 2, 3, 4, 5, 6, 7, 8], 8, 4))
    assert len(first) == len(other) == 2 and first[0] != other[0] and first[1] != other[1]
    assert list(keys_of([1, 2, 3, 4, 5, 6, 7, 8, 0], 8, 4)) == first
    assert list(keys_of([1, 2, 3, 4, 5, 6, 7, 8], 7, 4)) == first[:1]


def test_prompt_cache_reuses_a_prefix_with_identical_outputs():
    from aiayn.decoding import PromptCache

    lm = _lm()
    system = random_ids(1, 10, vocab=30)[0].tolist()
    store = PromptCache(lm, block_size=4)
    store.add(system)
    assert len(store.blocks) == 2  # whole blocks only: 8 of the 10 tokens
    for _ in range(3):
        prompt = torch.tensor([system + random_ids(1, 3, vocab=30)[0].tolist()])
        assert greedy_search(lm, prompt, 8, prompt_cache=store) == greedy_search(lm, prompt, 8)
    assert store.hits == 3 and store.hit_tokens >= 8 + 2 * 10  # then the first's block past 8 in part: 2 tokens
    other = torch.tensor([random_ids(1, 12, vocab=30)[0].tolist()])
    assert greedy_search(lm, other, 8, prompt_cache=store) == greedy_search(lm, other, 8)
    assert store.misses == 1


def test_a_stored_block_that_shares_leading_tokens_with_a_prompt_is_reused_in_part():
    """Past its last whole block, a prompt reuses the leading tokens it shares with a stored block (a token-level
    match: a token's keys depend only on the tokens before it), leaving at least one token for the model."""
    from aiayn.decoding import PromptCache

    lm = _lm()
    system = random_ids(1, 8, vocab=30)[0].tolist()
    store = PromptCache(lm, block_size=4)
    store.add([*system, 5, 6, 7, 8])
    for tail, reused in (([5, 6, 9, 9, 9], 10), ([5, 6, 7], 10), ([9, 5, 6, 7, 8], 8), ([5, 6, 7, 8, 9], 12)):
        prompt = torch.tensor([system + tail])
        before = store.hit_tokens
        assert greedy_search(lm, prompt, 6, prompt_cache=store) == greedy_search(lm, prompt, 6)
        assert store.hit_tokens - before == reused, tail
    longer = [*system, 5, 6, 7, 8, 4, 4, 4, 4]
    store.store(longer, *_computed(lm, longer))
    while store.blocks:  # eviction keeps the index of blocks by their prefix in step
        store.max_bytes = store.bytes - 1
        store.store([], None, 0, 0)
    assert store.children == {}


def _computed(lm, prompt: list[int]):
    cache = lm.new_cache(1, len(prompt), next(lm.parameters()))
    lm.decode(torch.tensor([prompt]), cache=cache)
    return cache, 0, len(prompt)


def test_the_byte_cap_evicts_the_least_recently_used_blocks():
    from aiayn.decoding import PromptCache

    lm = _lm()
    one = PromptCache(lm, block_size=4)
    one.add(random_ids(1, 4, vocab=30)[0].tolist())
    per_block = one.bytes
    store = PromptCache(lm, block_size=4, max_bytes=2 * per_block)
    first, second = (random_ids(1, 8, vocab=30)[0].tolist() for _ in range(2))
    store.add(first)
    store.add(second)  # two more blocks: the first prompt's two go
    assert store.bytes <= 2 * per_block and set(store.blocks) == {store.key(second[:4]), store.key(second)}


def test_eviction_takes_the_least_recently_used_block_first():
    """Under the byte cap the block read longest ago goes first: a block just reused survives an older one that
    was not (first-in-first-out would drop it)."""
    from aiayn.decoding import PromptCache

    lm = _lm()
    first, second, third = ([t] * 4 for t in (5, 6, 7))
    one = PromptCache(lm, block_size=4)
    one.add(first)
    store = PromptCache(lm, block_size=4, max_bytes=2 * one.bytes)  # room for two blocks
    store.add(first)
    store.add(second)
    assert store.lookup([*first, 9], 5)[0]  # first is read again: now the most recently used
    store.add(third)
    assert store.key(first) in store.blocks and store.key(third) in store.blocks
    assert store.key(second) not in store.blocks


def test_blocks_stored_together_load_as_one_copy_and_their_memory_is_counted_once():
    """A prompt's new blocks are copied out a run at a time (per layer one tensor, the blocks views of it), so a
    later prompt loads the run as one view and one copy into its row; ``bytes`` counts each copy once, and a small
    cap (copies of one block each) frees what it evicts."""
    from aiayn.decoding import PromptCache
    from aiayn.decoding.block_runs import spans_of
    from aiayn.decoding.prefix import token_bytes

    def counted(store):
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for block in store.blocks.values() for kv in block if kv is not None for t in kv}
        return sum(storages.values())

    lm = _lm()
    prompt = random_ids(1, 25, vocab=30)[0].tolist()
    store = PromptCache(lm, block_size=4)
    store.add(prompt)
    blocks, _ = store.lookup(prompt, len(prompt))
    assert len(blocks) == 6 and store.bytes == counted(store) == 24 * token_bytes(lm)
    for j in range(lm.config.n_decoder_layers):
        spans = spans_of([block[j] for block in blocks])
        assert len(spans) == 1 and spans[0][1].size(2) == 24  # one view over the six blocks
        assert torch.equal(spans[0][1], torch.cat([block[j][0] for block in blocks], 2))
    assert store._together(blocks) == [list(range(6))]  # known without looking: one run in every full layer
    cache, writes = lm.new_cache(1, 32, next(lm.parameters())), []
    for layer in cache.layers:
        write = layer.self_kv.write
        layer.self_kv.write = lambda start, k, v, write=write: writes.append(k.size(2)) or write(start, k, v)
    assert store.load([*prompt, 9], cache, 0) == 24 and writes == [24] * lm.config.n_decoder_layers
    one_block = store.bytes // 6
    small = PromptCache(lm, block_size=4, max_bytes=3 * one_block)
    small.add(prompt)
    assert len(small.blocks) == 3 and small.bytes == counted(small) <= small.max_bytes
    longer = torch.tensor([[*prompt, 7, 8]])
    assert greedy_search(lm, longer, 6, prompt_cache=store) == greedy_search(lm, longer, 6)


def test_a_row_reads_shared_blocks_where_they_lie_and_never_writes_them():
    """``share``: a one-row prompt's full layers read the stored blocks in place (views of the stored copy, no copy
    into the row) and its decoding never writes them; it decodes what a copying cache and no cache decode."""
    from aiayn.decoding import PromptCache
    from aiayn.decoding.config import DecodingConfig
    from aiayn.decoding.engine import Engine
    from aiayn.decoding.generation import rows_for

    lm = _lm()
    system = random_ids(1, 12, vocab=30)[0].tolist()
    prompt = torch.tensor([system + random_ids(1, 3, vocab=30)[0].tolist()])
    store = PromptCache(lm, block_size=4, share=True)
    store.add(system)
    kept = [[(k.clone(), v.clone()) for k, v in block] for block in store.blocks.values()]
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=8, max_len_b=None)
    engine = Engine(lm, prompt_cache=store)
    group, rows, beams = rows_for(lm, prompt, cfg)
    assert engine.admit(group, rows, beams) == 12
    state = engine.joining[0][2]
    layer = state.cache.layers[0].self_kv
    first = next(iter(store.blocks.values()))[0][0]
    assert layer.shared_length == 12 and layer.shared[0][0].untyped_storage().data_ptr() == \
        first.untyped_storage().data_ptr()  # a view of the stored copy
    assert store.held and not torch.equal(layer.k[:, :, :4], first)  # the row's own slots for them: no copy
    engine.run()
    for block, before in zip(store.blocks.values(), kept, strict=True):
        for (k, v), (k0, v0) in zip(block, before, strict=True):
            assert torch.equal(k, k0) and torch.equal(v, v0)
    copying = PromptCache(lm, block_size=4)
    copying.add(system)
    assert group.results() == greedy_search(lm, prompt, 8, prompt_cache=copying) == greedy_search(lm, prompt, 8)


def test_blocks_a_row_reads_are_not_evicted_until_it_lets_them_go():
    """Eviction takes the least recently used blocks that no row reads: over the cap, the blocks a running row reads
    stay; once the row's cache is freed (or copies them, joining a batch), they may go."""
    import gc

    from aiayn.decoding import PromptCache

    lm = _lm()
    first, second = random_ids(1, 8, vocab=30)[0].tolist(), random_ids(1, 8, vocab=30)[0].tolist()
    per_block = PromptCache(lm, block_size=4)
    per_block.add(first)
    store = PromptCache(lm, block_size=4, max_bytes=per_block.bytes, share=True)  # room for one prompt's blocks
    store.add(first)
    cache = lm.new_cache(1, 12, next(lm.parameters()))
    assert store.load([*first, 5, 6], cache, 0) == 8 and store.held
    store.add(second)  # over the cap: the first prompt's blocks are read, so the second's go instead
    assert store.key(first[:8]) in store.blocks and store.key(second[:4]) not in store.blocks
    del cache
    gc.collect()
    assert not store.held
    store.add(second)  # now the first's, least recently used, go
    assert store.key(first[:4]) not in store.blocks and store.key(second[:8]) in store.blocks
    assert store.bytes <= store.max_bytes
    cache = lm.new_cache(1, 12, next(lm.parameters()))
    store.load([*second, 5], cache, 0)
    for layer in cache.layers:  # copied into the row (a batch's join): let go at once
        layer.self_kv.materialize()
    assert not store.held and not cache.layers[0].self_kv.shared and bool(cache.layers[0].self_kv.k[:, :, :8].any())


def test_a_row_reading_shared_blocks_joins_a_batch_as_a_copy_and_decodes_as_alone():
    import gc

    from aiayn.decoding import PromptCache
    from aiayn.decoding.config import DecodingConfig
    from aiayn.decoding.engine import Engine
    from aiayn.decoding.generation import rows_for

    lm = _lm()
    system = random_ids(1, 12, vocab=30)[0].tolist()
    store = PromptCache(lm, block_size=4, share=True)
    store.add(system)
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=10, max_len_b=None)
    prompts = [torch.tensor([[*system, 7, 8]]), random_ids(1, 5, vocab=30)]
    engine, groups = Engine(lm, capacity=40, prompt_cache=store), []
    for prompt in prompts:
        group, rows, beams = rows_for(lm, prompt, cfg)
        engine.admit(group, rows, beams)
        groups.append(group)
        for _ in range(3):
            engine.step()
            if len(groups) == 1:
                assert engine.state.cache.layers[0].self_kv.shared  # alone: it reads the blocks where they lie
    gc.collect()
    assert not engine.state.cache.layers[0].self_kv.shared and not store.held  # in the batch: copied, let go
    engine.run()
    assert [g.results() for g in groups] == [greedy_search(lm, p, 10) for p in prompts]


def test_a_source_cache_gives_a_translator_the_same_outputs_without_the_encoder():
    """``SourceCache``: a batch of sources seen before takes its memory and cross-attention keys/values from the
    cache (greedy and beam search give what they give without it), another batch is computed, and the least
    recently used entry goes past the cap; it is for encoder-decoders only."""
    import pytest

    from aiayn import EncoderDecoder
    from aiayn.decoding import SourceCache, generate

    torch.manual_seed(3)
    model = EncoderDecoder(tiny(vocab_size=30)).double().eval()
    store = SourceCache(model)
    sources, other = random_ids(2, 6, vocab=30), random_ids(1, 4, vocab=30)
    for strategy in ("greedy", "beam"):
        plain = generate(model, sources, strategy, max_new_tokens=8, beam_size=3)
        assert generate(model, sources, strategy, max_new_tokens=8, beam_size=3, prompt_cache=store) == plain
    assert (store.hits, store.misses, store.hit_tokens) == (1, 1, 12)
    generate(model, other, "greedy", max_new_tokens=8, prompt_cache=store)
    assert store.misses == 2 and len(store.kept) == 2 and store.bytes == sum(e[2] for e in store.kept.values())
    small = SourceCache(model, max_bytes=store.kept[next(reversed(store.kept))][2])  # room for the small one only
    for batch in (sources, other):
        generate(model, batch, "greedy", max_new_tokens=8, prompt_cache=small)
    assert len(small.kept) == 1 and small.bytes <= small.max_bytes
    with pytest.raises(TypeError, match="encoder-decoder"):
        SourceCache(_lm())
