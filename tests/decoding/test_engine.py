"""The step-level engine: groups that join a running batch at different steps (encoder-decoder and decoder-only,
greedy, beam and seeded sampling) decode exactly what each decodes alone; rows leave; padding is trimmed."""

import pytest
import torch

from aiayn import DecoderOnly, ModelConfig, generate
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.engine import Engine
from aiayn.decoding.generation import rows_for

from conftest import random_ids, tiny

CONFIGS = [DecodingConfig(strategy="greedy", max_new_tokens=9, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=3, length_penalty=0.6, max_new_tokens=7, max_len_b=None),
           DecodingConfig(strategy="sample", seed=11, temperature=1.3, max_new_tokens=12, max_len_b=None),
           DecodingConfig(strategy="greedy", min_new_tokens=5, max_new_tokens=6, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=2, max_new_tokens=4, max_len_b=None)]


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(5)
    return DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()


def outputs(group, cfg: DecodingConfig) -> list[list[int]]:
    if cfg.strategy == "beam":
        return [hyps[0].tokens for hyps in group.nbest()]
    return group.results()


def staggered(model, inputs: list[torch.Tensor], capacity: int = 60) -> tuple[list, Engine, list[int]]:
    """Admit request i after i steps of the running batch; run to the end. Returns outputs per request."""
    engine, groups, widths = Engine(model, capacity=capacity), [], []
    for i, (src, cfg) in enumerate(zip(inputs, CONFIGS, strict=True)):
        group, rows, beams = rows_for(model, src, cfg)
        engine.admit(group, rows, beams)
        groups.append((group, cfg))
        engine.join()
        widths.append(engine.tokens.size(1))
        engine.step()
        engine.remove_done()
        for _ in range(i % 2):  # some join after two steps
            if engine.groups:
                engine.step()
                engine.remove_done()
    engine.run()
    return [outputs(g, cfg) for g, cfg in groups], engine, widths


def test_translation_rows_join_and_leave_and_equal_each_request_alone(model):
    torch.manual_seed(0)
    sources = [random_ids(1, n, vocab=30) for n in (5, 9, 3, 7, 6)]  # sources of different lengths
    together, engine, _ = staggered(model, sources)
    for src, cfg, out in zip(sources, CONFIGS, together, strict=True):
        assert out == generate(model, src, config=cfg), cfg
    assert not engine.groups and engine.tokens is None and engine.steps < sum(len(o[0]) + 1 for o in together)


def test_language_model_rows_join_with_prompts_of_different_lengths(lm):
    torch.manual_seed(1)
    prompts = [random_ids(1, n, vocab=30) for n in (4, 11, 2, 6, 8)]
    together, _, widths = staggered(lm, prompts)
    for prompt, cfg, out in zip(prompts, CONFIGS, together, strict=True):
        assert out == generate(lm, prompt, config=cfg), cfg
    assert max(widths) >= 11  # a longer prompt widened the running batch


def test_a_group_of_several_inputs_joins_as_one(model):
    src = random_ids(3, 6, vocab=30)
    cfg = CONFIGS[1]
    engine = Engine(model, capacity=40)
    first, rows, beams = rows_for(model, random_ids(1, 4, vocab=30), CONFIGS[0])
    engine.admit(first, rows, beams)
    engine.step()
    group, rows, beams = rows_for(model, src, cfg)
    engine.admit(group, rows, beams)
    assert engine.rows == 1 + 3 * 3  # a beam request takes beam-size rows per input
    engine.run()
    assert outputs(group, cfg) == generate(model, src, config=cfg)


def test_rows_that_leave_take_their_padding_with_them(lm):
    engine = Engine(lm, capacity=40)
    short = DecodingConfig(strategy="greedy", max_new_tokens=2)
    long = DecodingConfig(strategy="greedy", max_new_tokens=8)
    long_group, rows, beams = rows_for(lm, random_ids(1, 3, vocab=30), long)
    engine.admit(long_group, rows, beams)
    engine.step()
    short_group, rows, beams = rows_for(lm, random_ids(1, 10, vocab=30), short)
    engine.admit(short_group, rows, beams)  # a longer prompt: the running row gets padding in front
    engine.join()
    assert int(engine.state.left_pad[0]) > 0
    while not short_group.done:
        engine.step()
    engine.remove_done()
    assert engine.rows == 1 and engine.state.left_pad is None  # the padding every row had is gone
    assert engine.tokens.size(1) == engine.state.cache.position + 1


def test_joining_without_a_cache_is_a_clear_error(model):
    engine = Engine(model, use_cache=False)
    group, rows, beams = rows_for(model, random_ids(1, 4, vocab=30), CONFIGS[0])
    engine.admit(group, rows, beams)
    engine.step()
    other, rows, beams = rows_for(model, random_ids(1, 4, vocab=30), CONFIGS[0])
    engine.admit(other, rows, beams)
    with pytest.raises(ValueError, match="KV cache"):
        engine.step()


def test_a_long_prompt_is_computed_in_chunks_while_the_running_rows_go_on(lm):
    """Chunked prefill (``prefill_chunk``): a prompt longer than a chunk joins after one chunk a step; the rows
    already running take a token every step meanwhile, and every request decodes what it decodes alone."""
    torch.manual_seed(2)
    prompts = [random_ids(1, n, vocab=30) for n in (4, 23, 17, 2, 19)]  # beam, sampling, greedy: chunked
    engine, groups = Engine(lm, capacity=80, prefill_chunk=5), []
    for i, (prompt, cfg) in enumerate(zip(prompts, CONFIGS, strict=True)):
        group, rows, beams = rows_for(lm, prompt, cfg)
        engine.admit(group, rows, beams)
        groups.append((group, cfg))
        running = [g for g in engine.groups if not g.done]
        before = [g.steps for g in running]
        engine.step()
        assert [g.steps for g in running] == [b + 1 for b in before]  # nobody waited for the prompt
        if i == 1:
            assert engine.prefilling and group not in engine.groups  # 22 columns: 5 a step
        engine.remove_done()
    engine.run()
    assert not engine.prefilling and not engine.groups
    for prompt, (group, cfg) in zip(prompts, groups, strict=True):
        assert outputs(group, cfg) == generate(lm, prompt, config=cfg), cfg


def short_then_long(engine: Engine, model, short, long, cfg: DecodingConfig, steps: int = 1) -> tuple:
    """Admit the ``short`` prompt's group, step ``steps`` times, then admit the ``long`` one's: both groups."""
    first, rows, beams = rows_for(model, short, cfg)
    engine.admit(first, rows, beams)
    for _ in range(steps):
        engine.step()
    second, rows, beams = rows_for(model, long, cfg)
    engine.admit(second, rows, beams)
    return first, second


def test_a_chunk_runs_inside_the_running_rows_pass(lm):
    """Mixed batches: while a long prompt computes a chunk a step beside running rows, each step is one pass of the
    decoder over both (no pass of its own for the chunk), and everyone decodes what it decodes alone."""
    cfg = DecodingConfig(strategy="greedy", min_new_tokens=12, max_new_tokens=12, max_len_b=None)
    torch.manual_seed(4)
    short, long = random_ids(1, 3, vocab=30), random_ids(1, 22, vocab=30)
    engine = Engine(lm, capacity=60, prefill_chunk=4)
    first, second = short_then_long(engine, lm, short, long, cfg)
    passes = []
    forward, together = lm.decoder.forward, lm.decoder.forward_segments
    lm.decoder.forward = lambda *a, **k: passes.append("alone") or forward(*a, **k)
    lm.decoder.forward_segments = lambda x, parts: passes.append(len(parts)) or together(x, parts)
    try:
        for _ in range(6):  # 22 columns, 4 a step: the sixth chunk ends the prompt
            engine.step()
    finally:
        del lm.decoder.forward, lm.decoder.forward_segments
    assert passes == [2] * 6 and second in [g for g, *_ in engine.joining] and first.steps == 8
    engine.run()
    assert first.results() == generate(lm, short, config=cfg) and second.results() == generate(lm, long, config=cfg)


def test_a_chunk_shrinks_as_the_prompt_grows_so_that_its_cost_stays_about_one(lm):
    """A column at position p costs about 1 + p / (break-even x ATTENTION_RATE) columns at 0 (its attention reads
    every earlier position): ``prefill_chunk`` columns at the start, half as many where attention costs as much
    again, never fewer than one."""
    from aiayn.decoding.chunks import ATTENTION_RATE

    smollm2 = ModelConfig.preset("tiny", arch="decoder-only", d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                                 feed_forward="swiglu")
    assert smollm2.attention_break_even == (576 * 960 + 576 * 576 + 3 * 576 * 1536) // (2 * 9 * 64) == 3072
    engine = Engine(lm, prefill_chunk=16)
    even = lm.config.attention_break_even * ATTENTION_RATE
    assert engine.chunks.size(0) == 16 and engine.chunks.size(int(even)) == 8
    assert engine.chunks.size(int(3 * even)) == 4 and engine.chunks.size(10**9) == 1


class ScriptedClock:
    """A clock that moves only by what a pass costs on a scripted machine: ``step_s`` for the running rows and
    ``column_s`` for each chunk column at weight 1 (a column at position p: ``engine.chunks.weight(p)`` of them)."""

    def __init__(self, engine: Engine, step_s: float, column_s: float, monkeypatch, growth: float = 0.0) -> None:
        self.now, self.engine, self.step_s, self.column_s, self.growth = 0.0, engine, step_s, column_s, growth
        self.steps: list[tuple[int, float]] = []  # (chunk columns, seconds) of each pass beside running rows
        self.plain: list[tuple[int, float]] = []  # (chunk's first position, the rows' own seconds) of each
        together, step = engine.model.step_together, engine.model.step
        monkeypatch.setattr(engine.model, "step_together", lambda parts: self._pass(parts) or together(parts))
        monkeypatch.setattr(engine.model, "step", lambda tokens, state, *a, **kw: self._pass([(tokens, state)])
                            or step(tokens, state, *a, **kw))

    def __call__(self) -> float:
        return self.now

    def _pass(self, parts) -> None:
        if not self.engine.groups:  # a prompt computed alone: not a step of running rows
            return
        seconds, columns, position = self.step_s * (1 + self.growth * len(self.steps)), 0, 0  # the rows grow
        self.plain.append((0, seconds))
        for tokens, state in parts[1:]:
            columns, position = tokens.size(1) - state.position, state.position
            self.plain[-1] = (position, seconds)
            seconds += self.column_s * sum(self.engine.chunks.weight(p) for p in range(state.position, tokens.size(1)))
        self.steps.append((columns, seconds))
        self.now += seconds


def test_a_chunk_is_sized_to_the_step_time_budget_from_measured_step_times(lm, monkeypatch):
    """``prefill_budget``: once a step alone and a step with a chunk are measured, each chunk is as long as keeps
    the running rows' step within the budget on this (scripted) machine: a cheaper column gives longer chunks, a
    dearer one shorter, and every request decodes what it decodes alone."""
    cfg = DecodingConfig(strategy="greedy", min_new_tokens=40, max_new_tokens=40, max_len_b=None)
    torch.manual_seed(6)
    short, long = random_ids(1, 3, vocab=30), random_ids(1, 60, vocab=30)
    sizes = {}
    for column_s in (0.02, 0.1):
        engine = Engine(lm, capacity=120, prefill_chunk=4, prefill_budget=1.5)
        engine.clock = clock = ScriptedClock(engine, step_s=1.0, column_s=column_s, monkeypatch=monkeypatch)
        first, second = short_then_long(engine, lm, short, long, cfg, steps=3)
        while engine.prefilling:
            engine.step()
        chunks = [(columns, seconds) for columns, seconds in clock.steps if columns]
        sizes[column_s] = [columns for columns, _ in chunks], round(0.5 / (column_s * engine.chunks.weight(4)))
        assert chunks[0][0] == 4  # nothing measured with a chunk yet: --prefill-chunk
        assert all(seconds <= 1.5 * 1.05 for _, seconds in chunks[1:-1])  # within the budget (the last: what's left)
        engine.run()
        monkeypatch.undo()
        assert first.results() == generate(lm, short, config=cfg) and second.results() == generate(lm, long, config=cfg)
    for column_s, (columns, expected) in sizes.items():  # half a step's worth of columns after the first chunk
        assert columns[1] == expected, column_s
    assert sizes[0.02][0][1] > 2 * sizes[0.1][0][1] > 4


def test_the_running_rows_step_is_measured_again_while_a_long_prompt_is_chunked(lm, monkeypatch):
    """The running rows' step slows as their caches grow: every ``PROBE_EVERY`` steps with a chunk, one goes
    without, so that step is measured again and its growth is not taken for the chunk's cost: the chunks keep the
    size the budget gives at each step's own pace (measured once, they would shrink toward one column)."""
    from aiayn.decoding.chunks import PROBE_EVERY

    cfg = DecodingConfig(strategy="greedy", min_new_tokens=150, max_new_tokens=150, max_len_b=None)
    torch.manual_seed(7)
    engine = Engine(lm, capacity=400, prefill_chunk=4, prefill_budget=2)
    engine.clock = clock = ScriptedClock(engine, step_s=1.0, column_s=0.02, monkeypatch=monkeypatch, growth=0.05)
    short_then_long(engine, lm, random_ids(1, 3, vocab=30), random_ids(1, 220, vocab=30), cfg, steps=3)
    while engine.prefilling:
        engine.step()
    passes = list(zip(clock.steps, clock.plain, strict=True))[3:]  # from the long prompt's first chunk
    columns = [c for (c, _), _ in passes]
    assert 0 in columns[1: PROBE_EVERY + 2]  # a step without the chunk, measured alone
    for (c, _), (position, rows_s) in passes[PROBE_EVERY * 2: -1]:  # once measured again, before the last chunk
        if c:
            assert c >= 0.6 * (2 - 1) * rows_s / (0.02 * engine.chunks.weight(position)), (c, position, rows_s)


def test_a_chunked_prompts_blocks_are_kept_as_they_are_computed(lm, monkeypatch):
    """A prompt computed a chunk a step stores its whole blocks in the prompt cache each ``STORE_EVERY`` columns,
    not all at its end (one long pause of the running rows); it and a later request for it decode as alone."""
    from aiayn.decoding import engine as engine_module
    from aiayn.decoding.prefix import PromptCache

    monkeypatch.setattr(engine_module, "STORE_EVERY", 8)
    cfg = DecodingConfig(strategy="greedy", min_new_tokens=30, max_new_tokens=30, max_len_b=None)
    torch.manual_seed(8)
    short, long = random_ids(1, 3, vocab=30), random_ids(1, 40, vocab=30)
    cache = PromptCache(lm, block_size=4, max_bytes=2**24)
    engine = Engine(lm, capacity=120, prompt_cache=cache, prefill_chunk=3)
    _, second = short_then_long(engine, lm, short, long, cfg)
    kept = []
    while engine.prefilling:
        engine.step()
        kept.append(len(cache.lookup(long[0].tolist(), 40)[0]))
    assert kept[2] == 2 and kept[5] == 4 and kept[-2] == 8 and kept[-1] == 10  # 9, 18, 36 columns; then all 40
    engine.run()
    assert second.results() == generate(lm, long, config=cfg)
    again, rows, beams = rows_for(lm, long, cfg)
    assert engine.admit(again, rows, beams) == 39  # every column but the last, from the cache
    engine.run()
    assert again.results() == second.results()


def test_only_prompts_longer_than_the_long_prefill_threshold_go_a_chunk_at_a_time(lm):
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=5, max_len_b=None)
    engine = Engine(lm, capacity=60, prefill_chunk=2, long_prefill=10)
    prompts = [random_ids(1, n, vocab=30) for n in (3, 10, 11)]  # 10 columns: at once; 11: in chunks
    groups = []
    for prompt in prompts:
        group, rows, beams = rows_for(lm, prompt, cfg)
        engine.admit(group, rows, beams)
        groups.append(group)
        engine.step()
    assert [g for g, *_ in engine.prefilling] == [groups[2]] and groups[1].steps == 3  # at once, then two steps
    engine.run()
    assert [g.results() for g in groups] == [generate(lm, p, config=cfg) for p in prompts]


def test_a_prompt_pass_picks_the_first_token_so_a_joining_prompt_costs_one_pass(lm):
    """The pass over a newcomer's prompt yields its first token (vLLM's prefill), with or without the prompt cache:
    no second pass for its last column."""
    from aiayn.decoding.prefix import PromptCache

    cfg = DecodingConfig(strategy="greedy", max_new_tokens=5, max_len_b=None)
    for prompt_cache in (None, PromptCache(lm, block_size=4)):
        engine = Engine(lm, capacity=60, prompt_cache=prompt_cache)
        first, rows, beams = rows_for(lm, random_ids(1, 6, vocab=30), cfg)
        engine.admit(first, rows, beams)
        engine.step()
        prompt = random_ids(1, 13, vocab=30)
        group, rows, beams = rows_for(lm, prompt, cfg)
        passes, step = [], lm.step

        def counted(tokens, state, last=False, passes=passes, step=step):
            passes.append(tokens.size(0))
            return step(tokens, state, last)

        lm.step = counted
        try:
            engine.admit(group, rows, beams)
        finally:
            del lm.step
        assert passes == [1] and group.steps == 1  # one pass over its prompt alone, and its first token
        engine.run()
        assert group.results() == generate(lm, prompt, config=cfg)


def test_a_long_prompt_joining_short_rows_never_reads_their_padding(lm):
    """Rows padded in front by far more than ``SLACK`` columns are attended apart from their first real column:
    the padding of an assembled cache is left unwritten (a long prompt joining short rows costs its own columns,
    not the batch's width), so it may hold anything, NaN included, and every row still decodes as alone."""
    from aiayn.model.kv_cache import SLACK

    long_lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope", max_len=200)).double().eval()
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=6, max_len_b=None)
    prompts = [random_ids(1, n, vocab=30) for n in (3, 5, SLACK + 40)]
    engine, groups = Engine(long_lm, capacity=200), []
    for prompt in prompts:
        group, rows, beams = rows_for(long_lm, prompt, cfg)
        engine.admit(group, rows, beams)
        groups.append(group)
    engine.join()
    starts = engine.state.left_pad.tolist()
    assert starts[0] - SLACK > 0 and starts[2] == 0
    for layer in engine.state.cache.layers:  # what unwritten memory may hold, beyond the zeroed slack
        for t in (layer.self_kv.k, layer.self_kv.v):
            for row, start in enumerate(starts):
                t[row, :, :max(0, start - SLACK)] = float("nan")
    engine.run()
    for prompt, group in zip(prompts, groups, strict=True):
        assert group.results() == generate(long_lm, prompt, config=cfg)
