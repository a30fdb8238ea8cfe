"""The decoding step with shapes that do not change (model/static.py) against the eager step it stands for."""

import copy

import pytest
import torch

from aiayn import DecoderOnly
from aiayn.inference.compiled import KINDS, CompiledStep
from aiayn.inference.precision import fuse
from aiayn.model.kv_cache import KVCache
from aiayn.model.state import DecodeState
from aiayn.model.static import SPAN, slot_mask, span_of, static_inputs

from conftest import greedy_steps, random_ids, tiny

MEMBERS = {
    "rope-gqa": dict(positions="rope", n_kv_heads=2),
    "sliding-qk-norm": dict(positions="rope", norm="sandwich", qk_norm=True, n_decoder_layers=3,
                            layer_types=["sliding", "full", "sliding"], sliding_window=4),
    "every-layer-window": dict(positions="rope", sliding_window=5),
    "experts": dict(positions="rope", feed_forward="swiglu", activation="silu", n_experts=4, experts_per_token=2,
                    expert_d_ff=24),
    "learned": dict(positions="learned"),
    "sinusoidal-softcap": dict(positions="sinusoidal", attention_softcap=20.0, logit_softcap=10.0),
}


def _model(name: str) -> DecoderOnly:
    torch.manual_seed(5)
    return fuse(DecoderOnly(tiny(arch="decoder-only", vocab_size=30, **MEMBERS[name])).double().eval())


def static_counted(model: DecoderOnly, batches: bool = False, columns: bool = False) -> list[int]:
    """Attach ``model``'s static step (its reference, uncompiled) with its graphs counted: the list of the rows (or,
    of one row, the tokens) of every step it computed (a step it leaves to the eager one is not in it)."""
    static = CompiledStep(model, compiled=False, batches=batches, columns=columns)
    taken, step = [], static.step
    static.graphs = {kind: (lambda *args: taken.append(args[0].numel()) or step(*args)) for kind in KINDS}
    model.runtime.static = static
    return taken


def _garbage_caches(monkeypatch) -> None:
    """Every new full layer's KVCache memory holds NaN, as memory allocated and not zeroed may (0 x NaN is NaN; a
    sliding layer's ring is zeros)."""
    init = KVCache.__init__

    def nan_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.window is None:
            self.k.fill_(float("nan"))
            self.v.fill_(float("nan"))

    monkeypatch.setattr(KVCache, "__init__", nan_init)


@pytest.mark.parametrize("name", MEMBERS)
def test_the_static_step_equals_the_eager_step_token_for_token(name, monkeypatch):
    """Every member that decodes, 14 greedy tokens past a 3-token prompt (a window of 4 or 5 wraps its ring
    several times): the static step's logits and caches equal the eager step's, and the tokens are the same,
    while a new cache's memory holds NaN (it is allocated, not zeroed: neither step may read a slot unwritten)."""
    _garbage_caches(monkeypatch)
    model = _model(name)
    prompts = random_ids(1, 3, vocab=30)
    eager, eager_state = greedy_steps(model, prompts, 14)
    taken = static_counted(model)
    static, static_state = greedy_steps(model, prompts, 14)
    assert taken == [1] * 14  # one row each: every step after the prompt's
    for a, b in zip(eager, static, strict=True):
        assert a.shape == b.shape == (1, 1, 30) and torch.allclose(a, b, atol=1e-9)
    assert [t.argmax().item() for t in eager] == [t.argmax().item() for t in static]
    for a, b in zip(eager_state.cache.layers, static_state.cache.layers, strict=True):
        assert (a.self_kv.length, a.self_kv.first) == (b.self_kv.length, b.self_kv.first)
        held = min(a.self_kv.length, a.self_kv.capacity)  # the written slots (the rest is NaN in the eager one)
        for x, y in ((a.self_kv.k, b.self_kv.k), (a.self_kv.v, b.self_kv.v)):
            assert torch.allclose(x[:, :, :held], y[:, :, :held], atol=1e-9)


def _verifying_passes(model: DecoderOnly, prompts: torch.Tensor, passes: int, seed: int) -> list[torch.Tensor]:
    """Speculative decoding's passes, scripted: each feeds the row's last token and 1 to 4 random guesses (2 to 5
    columns), keeps a random number of them (the cache rolled back past the rest) and the arg-max after the last
    kept. Returns each pass's logits (1, C, V)."""
    rng = torch.Generator().manual_seed(seed)
    tokens, state = model.start(prompts, 60)
    out = []
    with torch.no_grad():
        logits = model.step(tokens, state, last=True)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # (1, W): W - 1 in the cache
        for _ in range(passes):
            c = int(torch.randint(2, 6, (1,), generator=rng))
            fed = torch.cat([tokens, torch.randint(1, 30, (1, c - 1), generator=rng)], dim=1)  # (1, W + c - 1)
            logits = model.step(fed, state)  # (1, c, V)
            out.append(logits)
            kept = int(torch.randint(1, c + 1, (1,), generator=rng))  # the last token and kept - 1 guesses
            state.cache.truncate(tokens.size(1) - 1 + kept)
            tokens = torch.cat([fed[:, :tokens.size(1) - 1 + kept], logits[:, kept - 1].argmax(-1, keepdim=True)],
                               dim=1)
    return out


@pytest.mark.parametrize("name", ["rope-gqa", "sliding-qk-norm", "every-layer-window", "sinusoidal-softcap"])
def test_a_rows_several_new_tokens_step_statically_as_they_do_eagerly(name, monkeypatch):
    """Verifying passes of 2 to 5 tokens of one row, each rolled back past the guesses refused (speculative
    decoding, scripted), over 14 passes (a window of 4 or 5 wraps its ring of 20 or 21 slots, with stale slots past the
    rollback): the static step's logits equal the eager step's at every column, and it computed every pass."""
    _garbage_caches(monkeypatch)
    model = _model(name)
    prompts = random_ids(1, 3, vocab=30)
    eager = _verifying_passes(model, prompts, 14, seed=1)
    taken = static_counted(model, columns=True)
    static = _verifying_passes(model, prompts, 14, seed=1)
    assert taken == [a.size(1) for a in eager] and max(taken) == 5 and min(taken) == 2
    for a, b in zip(eager, static, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-9)


def test_a_full_layer_attends_only_its_slots_up_to_the_span_past_the_column():
    """A text of 20 columns in a cache of 4 x SPAN: the static step attends the first SPAN slots alone (the rest
    may hold anything, NaN here, and the logits equal the eager step's), however long the cache."""
    assert [span_of(c, 4 * SPAN) for c in (0, SPAN - 1, SPAN, 4 * SPAN - 2)] == [SPAN, SPAN, 2 * SPAN, 4 * SPAN - 1]
    assert span_of(10, 30) == 29  # never the whole cache (its last slot is the eager step's)
    model = _model("rope-gqa")
    prompts = random_ids(1, 3, vocab=30)
    eager, _ = greedy_steps(model, prompts, 16, capacity=4 * SPAN, poison=True)
    taken = static_counted(model)
    static, _ = greedy_steps(model, prompts, 16, capacity=4 * SPAN, poison=True)
    assert taken == [1] * 16  # every token's step (the cache's last slot is far off)
    assert all(torch.allclose(a, b, atol=1e-9) for a, b in zip(eager, static, strict=True))
    assert all(torch.isfinite(t).all() for t in static)


def test_rows_padded_in_front_step_statically_as_they_do_eagerly():
    """Two prompts of different lengths (the shorter left-padded, each row's positions its own): one static step
    through ``step_static`` equals the eager step on both rows."""
    model = _model("rope-gqa")
    prompts = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 0, 0, 0]])  # right-padded; start() left-aligns them
    tokens, state = model.start(prompts, 4)
    with torch.no_grad():
        model.step(tokens, state, last=True)
        tokens = torch.cat([tokens, torch.tensor([[12], [13]])], dim=1)
        twin = copy.deepcopy(state)
        eager = model.step(tokens, state, last=True)
        new, left_pad, kv = static_inputs(model, tokens, twin)
        windows = [layer.self_kv.window for layer in twin.cache.layers]
        static = model.step_static(new, torch.tensor([twin.position]), left_pad, kv, windows)
    assert left_pad.tolist() == [0, 3] and torch.allclose(eager, static, atol=1e-9)


def test_a_slot_is_seen_while_its_column_is_real_and_within_the_window():
    """The mask over a ring of 6 slots at column 9 (slots hold columns 6, 7, 8, 9, 4, 5), window 3, rows padded by
    0 and 8 columns: only columns 7, 8, 9, and for the second row 8 and 9."""
    mask = slot_mask(torch.tensor([9]), torch.tensor([0, 8]), 6, 3)  # (2, 1, 1, 6)
    assert mask[:, 0, 0].tolist() == [[False, True, True, True, False, False], [False, False, True, True, False, False]]
    full = slot_mask(torch.tensor([2]), torch.tensor([0]), 6, None)  # a cache longer than the text: columns 0..2
    assert full[0, 0, 0].tolist() == [True, True, True, False, False, False]


def test_steps_the_static_step_does_not_compute_are_left_to_the_eager_one():
    """Several new columns of a prompt (or more than ``COLUMNS``), a shortlist's output rows and a full layer's last
    slot (never in a span: ``span_of``) are stepped eagerly (None)."""
    model = _model("rope-gqa")
    tokens, state = model.start(random_ids(1, 4, vocab=30), 2)
    assert static_inputs(model, tokens, state, last=True) is None  # a prompt of 4 new columns
    assert static_inputs(model, torch.cat([tokens] * 5, dim=1), state) is None  # more than COLUMNS
    with torch.no_grad():
        model.step(tokens, state, last=True)
    more = torch.cat([tokens, torch.tensor([[7]])], dim=1)
    shortlist = DecodeState(state.cache, output=lambda h: h)
    assert static_inputs(model, more, shortlist) is None
    assert static_inputs(model, more, state) is not None
    with torch.no_grad():
        model.step(more, state, last=True)  # 5 of the cache's 6 positions written: its last slot is next
    assert static_inputs(model, torch.cat([more, torch.tensor([[8]])], dim=1), state) is None


@pytest.mark.parametrize("name", ["rope-gqa", "sliding-qk-norm"])
def test_rows_that_join_and_leave_a_running_batch_step_statically_as_each_alone(name, monkeypatch):
    """The server's engine: prompts of different lengths join a running batch and leave it at different steps,
    every step of one row or more through the static step (its reference, uncompiled). Each text equals the eager
    model's alone, while the memory a re-assembled cache is allocated from holds NaN (a slot no position was
    written to is attended under a False mask: 0 x NaN would be NaN)."""
    from aiayn.decoding.config import DecodingConfig
    from aiayn.decoding.engine import Engine
    from aiayn.decoding.generation import generate, rows_for

    model = _model(name)
    torch.manual_seed(2)
    prompts = [random_ids(1, n, vocab=30) for n in (3, 9, 5)]
    configs = [DecodingConfig(strategy="greedy", min_new_tokens=n, max_new_tokens=n) for n in (12, 4, 7)]
    alone = [generate(model, p, config=c) for p, c in zip(prompts, configs, strict=True)]
    new_empty = torch.Tensor.new_empty
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda t, *a, **k: new_empty(t, *a, **k).fill_(float("nan")))
    taken = static_counted(model, batches=True)
    engine, groups, steps = Engine(model, capacity=40), [], []
    for prompt, config in zip(prompts, configs, strict=True):
        group, rows, beams = rows_for(model, prompt, config)
        engine.admit(group, rows, beams)
        groups.append(group)
        for _ in range(2):
            engine.step()
            steps.append(engine.rows)
            engine.remove_done()
    engine.run()
    assert [group.results() for group in groups] == alone
    assert 1 in steps and 3 in steps  # one row and three rows stepped together
    assert 1 in taken and 3 in taken  # and so through the static step
