"""Decoding: beam search checked token by token and score by score on a scripted model; invariances."""

import math

import pytest
import torch
from torch import Tensor

from aiayn import EncoderDecoder
from aiayn.decoding import beam_search, greedy_search
from aiayn.decoding.beam import length_penalty

from conftest import random_ids, tiny

A, B, EOS = 4, 5, 2
SCRIPT = {  # prefix (after BOS) -> next-token probabilities; anything else has probability 0
    (): {A: 0.6, B: 0.4},
    (A,): {EOS: 0.4, A: 0.1, B: 0.5},
    (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    (A, B): {EOS: 1.0}, (A, A): {EOS: 1.0}, (B, A): {EOS: 1.0}, (B, B): {EOS: 1.0},
}


class ScriptedModel(EncoderDecoder):
    """An encoder-decoder whose next-token distribution is read from SCRIPT (fairseq-style test model)."""

    def __init__(self) -> None:
        super().__init__(tiny(vocab_size=8))

    def encode(self, src_ids: Tensor, need_weights: bool = False) -> Tensor:
        return torch.zeros(src_ids.size(0), src_ids.size(1), 1)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_mask=None, cache=None) -> Tensor:
        assert cache is None, "run with use_cache=False: the script needs whole prefixes"
        logits = torch.full((tgt_ids.size(0), tgt_ids.size(1), 8), float("-inf"))
        for row, ids in enumerate(tgt_ids.tolist()):
            for tok, p in SCRIPT.get(tuple(ids[1:]), {EOS: 1.0}).items():
                logits[row, -1, tok] = math.log(p)
        return logits


def test_scripted_beam_search_hypotheses_and_scores():
    src = torch.tensor([[7, 7]])
    (nbest,) = beam_search(ScriptedModel(), src, beam_size=2, max_new_tokens=5, alpha=1.0, use_cache=False)
    assert [h.tokens for h in nbest] == [[B], [A, B]]
    assert nbest[0].logprob == pytest.approx(math.log(0.4 * 0.9))
    assert nbest[0].score == pytest.approx(math.log(0.36) / length_penalty(2, 1.0))
    assert nbest[1].logprob == pytest.approx(math.log(0.6 * 0.5))
    assert nbest[1].score == pytest.approx(math.log(0.30) / ((5 + 3) / 6))


def test_scripted_greedy_takes_the_locally_best_path():
    assert greedy_search(ScriptedModel(), torch.tensor([[7]]), 5, use_cache=False) == [[A, B]]


def test_scripted_min_length_and_max_length():
    # EOS is forbidden for 2 steps: after (B,) the best non-EOS continuations are A/B at 0.05.
    (nbest,) = beam_search(ScriptedModel(), torch.tensor([[7]]), 2, 5, min_new_tokens=2, alpha=0.0,
                           use_cache=False)
    assert all(len(h.tokens) >= 2 for h in nbest) and nbest[0].tokens == [A, B]
    (cut,) = beam_search(ScriptedModel(), torch.tensor([[7]]), 2, 1, alpha=0.0, use_cache=False)
    assert sorted(h.tokens for h in cut) == [[A], [B]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(3)
    return EncoderDecoder(tiny(vocab_size=30)).double().eval()


def test_beam_size_one_equals_greedy(model):
    src = random_ids(6, 7, vocab=30)
    greedy = greedy_search(model, src, 12)
    beam = [h[0].tokens for h in beam_search(model, src, beam_size=1, max_new_tokens=12, alpha=0.0)]
    assert beam == greedy


@pytest.mark.parametrize("use_beam", [False, True])
def test_batch_invariance_and_cache_invariance(model, use_beam):
    torch.manual_seed(5)
    lengths = [3, 9, 5, 7]
    rows = [random_ids(1, n, vocab=30)[0].tolist() for n in lengths]
    padded = torch.zeros(4, 9, dtype=torch.long)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = torch.tensor(r)

    def run(src, use_cache=True):
        if use_beam:
            return [h[0].tokens for h in beam_search(model, src, 3, 10, use_cache=use_cache)]
        return greedy_search(model, src, 10, use_cache=use_cache)

    together = run(padded)
    assert together == [run(torch.tensor([r]))[0] for r in rows]
    assert together == run(padded, use_cache=False)


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


def test_generate_min_new_tokens_and_nbest(model):
    from aiayn import generate

    src = random_ids(2, 5, vocab=30)
    outs = generate(model, src, "beam", beam_size=3, num_return_sequences=3, max_new_tokens=8, min_new_tokens=4)
    assert len(outs) == 6 and all(len(o) >= 4 for o in outs)
    with pytest.raises(ValueError, match="strategy"):
        generate(model, src, "magic")


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


def _train_reverse(cfg, steps):
    from aiayn.data.synthetic import copy_batch
    from aiayn.training.objective import make_optimizer, seq2seq_loss, shift_target

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    m = EncoderDecoder(cfg)
    opt = make_optimizer(m, lr=3e-3)
    for _ in range(steps):
        src, tgt = copy_batch(cfg, 32, gen, reverse=True)
        tgt_in, labels = shift_target(tgt, 0, 2)
        loss = seq2seq_loss(m(src, tgt_in), labels, 0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval().double()


def test_speculative_greedy_equals_plain_greedy():
    from aiayn.decoding import speculative_greedy

    main = _train_reverse(tiny(vocab_size=20), 300)
    draft = _train_reverse(tiny(vocab_size=20, d_model=32, n_encoder_layers=1, n_decoder_layers=1), 150)
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
