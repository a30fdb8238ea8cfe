"""aiayn.generate: the one entry to every strategy, its options and its errors."""

import pytest
import torch

from aiayn import DecoderOnly, generate
from aiayn.data.batching import pad_batch
from aiayn.decoding import SpeculativeStats

from conftest import random_ids, tiny, train_reverse


def test_generate_min_new_tokens_and_nbest(model):
    src = random_ids(2, 5, vocab=30)
    outs = generate(model, src, "beam", beam_size=3, num_return_sequences=3, max_new_tokens=8, min_new_tokens=4)
    assert len(outs) == 6 and all(len(o) >= 4 for o in outs)
    with pytest.raises(ValueError, match="strategy"):
        generate(model, src, "magic")


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rope"])
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoder_only_prompts_of_different_lengths_equal_each_alone(positions, strategy):
    torch.manual_seed(4)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions=positions)).double().eval()
    prompts = [random_ids(1, n, vocab=30)[0].tolist() for n in (2, 7, 4, 1)]
    batch = pad_batch(prompts, pad_id=0)  # right-padded, as generate() takes them
    together = generate(lm, batch, strategy, beam_size=3, max_new_tokens=9, min_new_tokens=9)
    alone = [generate(lm, torch.tensor([p]), strategy, beam_size=3, max_new_tokens=9, min_new_tokens=9)[0]
             for p in prompts]
    assert together == alone
    assert together == generate(lm, batch, strategy, beam_size=3, max_new_tokens=9, min_new_tokens=9,
                                use_cache=False)


def test_length_policy_caps_each_row_by_its_input_length(model):
    src = pad_batch([random_ids(1, n, vocab=30)[0].tolist() for n in (2, 6, 4)], pad_id=0)
    outs = generate(model, src, "greedy", max_new_tokens=None, min_new_tokens=20, max_len_a=1.5, max_len_b=1)
    assert [len(o) for o in outs] == [4, 10, 7]  # 1.5 * length + 1, EOS forbidden until then
    capped = generate(model, src, "greedy", max_new_tokens=5, min_new_tokens=20, max_len_a=1.5, max_len_b=1)
    assert [len(o) for o in capped] == [4, 5, 5]


def test_speculative_through_generate_honours_per_row_limits():
    main = train_reverse(tiny(vocab_size=20), 100)
    draft = train_reverse(tiny(vocab_size=20, d_model=32, n_encoder_layers=1, n_decoder_layers=1), 50)
    src = random_ids(6, 8, vocab=20)
    limits = torch.tensor([0, 1, 3, 5, 8, 12])
    stats = SpeculativeStats()
    outs = generate(main, src, "greedy", max_new_tokens=limits, draft_model=draft, draft_tokens=3,
                    speculative_stats=stats)
    assert outs == generate(main, src, "greedy", max_new_tokens=limits)
    assert all(len(o) <= n for o, n in zip(outs, limits.tolist(), strict=True)) and stats.main_passes > 0


def test_generate_option_errors(model):
    src = random_ids(2, 5, vocab=30)
    with pytest.raises(ValueError, match="draft: speculative decoding is greedy or sampled"):
        generate(model, src, "beam", draft_model=model)
    with pytest.raises(ValueError, match="num_return_sequences"):
        generate(model, src, "greedy", num_return_sequences=2)
    with pytest.raises(ValueError, match="max_new_tokens"):  # no limit at all: neither relative nor fixed
        generate(model, src, "greedy", max_new_tokens=None, max_len_b=None)
    with pytest.raises(ValueError, match="num_return_sequences: at most beam_size=2"):
        generate(model, src, "beam", beam_size=2, num_return_sequences=3)
    for bad, field in [({"top_k": -2}, "top_k"), ({"temperature": float("nan")}, "temperature"),
                       ({"top_p": 0.0}, "top_p"), ({"strategy": "typical"}, "strategy")]:
        with pytest.raises(ValueError, match=f"^{field}: must be"):  # checked before any model call
            generate(model, src, **{"strategy": "sample", **bad})
    with pytest.raises(ValueError, match="colour: not a decoding option"):
        generate(model, src, colour="red")
