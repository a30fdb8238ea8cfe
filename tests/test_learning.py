"""The models learn: the SPEC's copy task, and a repeated pattern for the decoder-only model."""

import torch

from aiayn import DecoderOnly
from aiayn.decoding import greedy_search
from aiayn.training.demo import CopyRecipe, exact_match, train_copy
from aiayn.training.objective import label_smoothed_cross_entropy, make_optimizer

from conftest import tiny


def test_copy_task_reaches_99_percent_exact_match():
    """The demo's recipe (2,000 steps: about 40 s on 2 CPU cores; speed is shown by `aiayn demo --task copy`)."""
    model = train_copy(CopyRecipe(), progress=False)
    accuracy, _ = exact_match(model, n=1000, seed=99)
    assert accuracy >= 0.99, accuracy


def test_decoder_only_learns_a_repeated_pattern(device):
    torch.manual_seed(0)
    model = DecoderOnly(tiny(arch="decoder-only")).train()
    pattern = torch.tensor([5, 9, 7, 12, 6, 30])
    data = pattern.repeat(6)[None].repeat(8, 1)  # (8, 36)
    opt = make_optimizer(model, lr=3e-3)
    for _ in range(150):
        loss = label_smoothed_cross_entropy(model(data[:, :-1]), data[:, 1:], pad_id=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05, loss.item()
    out = greedy_search(model.eval(), pattern[None, :4], max_new_tokens=8)
    assert out[0] == [6, 30, 5, 9, 7, 12, 6, 30]
