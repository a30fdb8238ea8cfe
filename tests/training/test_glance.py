"""Glancing training (GLAT) for the CMLM task: with a scripted first pass, exactly floor(ratio * wrong) reference
tokens are revealed, at real positions, and take no loss; the loss is the cross-entropy of the positions not
revealed, checked term by term against a fake model of scripted logits; the ratio anneals with training; the
recipe field is checked."""

import math

import pytest
import torch

from aiayn.training.config import TrainConfig
from aiayn.training.objective import glance_targets, glancing_loss

from conftest import tiny

PAD, MASK = 0, 4


def test_exactly_ratio_times_the_mistakes_are_revealed_and_they_take_no_loss():
    tgt = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, PAD, PAD, PAD], [14, 15, 16, 17, PAD, PAD]])
    guess = torch.tensor([[5, 0, 0, 8, 0, 0],  # 4 wrong
                          [11, 12, 13, 9, 9, 9],  # none wrong (what it says at padding does not count)
                          [0, 0, 0, 0, 0, 0]])  # 4 wrong
    gen = torch.Generator().manual_seed(0)
    for ratio, expected in ((0.5, [2, 0, 2]), (0.3, [1, 0, 1]), (1.0, [4, 0, 4]), (0.0, [0, 0, 0])):
        inputs, labels = glance_targets(guess, tgt, PAD, MASK, ratio, gen)
        real = tgt != PAD
        revealed = real & (inputs != MASK)
        assert revealed.sum(dim=1).tolist() == expected, ratio
        assert torch.equal(inputs[revealed], tgt[revealed])  # revealed: the reference token itself
        assert torch.equal(labels != PAD, real & ~revealed)  # the loss: every real position not revealed
        assert torch.equal(labels[labels != PAD], tgt[labels != PAD])
        assert torch.equal(inputs[~real], tgt[~real])  # padding stays padding


def test_the_revealed_positions_are_drawn_at_random():
    tgt = torch.arange(5, 25)[None].repeat(2, 1)  # (2, 20)
    guess = torch.zeros_like(tgt)  # all 20 wrong: 10 revealed in each row
    inputs, _ = glance_targets(guess, tgt, PAD, MASK, 0.5, torch.Generator().manual_seed(1))
    rows = [tuple((row != MASK).nonzero().flatten().tolist()) for row in inputs]
    assert [len(r) for r in rows] == [10, 10] and rows[0] != rows[1] and rows[0] != tuple(range(10))


class ScriptedCMLM(torch.nn.Module):
    """A fake CMLM: its logits are fixed per position (the first pass's argmax is ``first``), whatever the inputs,
    but for a bonus where an input token is revealed (so the second pass can be told from the first)."""

    def __init__(self, first: torch.Tensor, vocab: int = 30) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.base = torch.full((*first.shape, vocab), -2.0).scatter(-1, first[..., None], 3.0)
        self.calls: list[torch.Tensor] = []

    def forward(self, src, tgt, with_length=False):
        self.calls.append(tgt.clone())
        logits = self.base * self.scale
        if with_length:
            return logits, torch.zeros(tgt.size(0), 8, requires_grad=True)
        return logits


def test_the_loss_is_the_cross_entropy_of_the_positions_not_revealed():
    cfg = tiny(kind="cmlm")
    tgt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, PAD]])
    first = torch.tensor([[5, 20, 21, 22], [9, 10, 23, 24]])  # row 0: 3 wrong, row 1: 1 wrong
    model = ScriptedCMLM(first)
    loss, n = glancing_loss(model, cfg, torch.ones(2, 3, dtype=torch.long), tgt, torch.Generator().manual_seed(0),
                            ratio=0.7, smoothing=0.0, length_weight=0.0)
    first_pass, second = model.calls
    assert torch.equal(first_pass, torch.tensor([[MASK] * 4, [MASK, MASK, MASK, PAD]]))  # all masked, no peeking
    revealed = (second != MASK) & (tgt != PAD)
    assert revealed.sum(dim=1).tolist() == [2, 0]  # floor(0.7 * 3), floor(0.7 * 1)
    logp = model.base.log_softmax(dim=-1)
    expected = -sum(float(logp[b, t, tgt[b, t]]) for b in range(2) for t in range(4)
                    if tgt[b, t] != PAD and not revealed[b, t])
    assert n == 5 and math.isclose(loss.item(), expected, rel_tol=1e-5)
    loss.backward()
    assert model.scale.grad is not None  # the second pass trains


def test_the_ratio_anneals_with_training_progress():
    from aiayn.data.corpus import Parallel
    from aiayn.tokenizers import SentencePiecePair
    from aiayn.training.tasks import CMLMTask

    pairs = Parallel([f"a b c {w}" for w in "defghij" * 10], [f"x y {w} z w" for w in "defghij" * 10])
    tokenizers = SentencePiecePair.train(pairs.sources, pairs.targets, 300, True, "bpe")
    task = CMLMTask(pairs, tokenizers, tiny(vocab_size=len(tokenizers.src), kind="cmlm"), 32, 512, seed=3)
    task.glance = (0.5, 0.3)
    seen = []

    def spy(model, cfg, src, tgt, gen, ratio, smoothing, length_weight):
        seen.append(ratio)
        return torch.zeros(()), 1

    import aiayn.training.tasks as tasks

    original, tasks.glancing_loss = tasks.glancing_loss, spy
    try:
        for progress in (0.0, 0.5, 1.0):
            task.progress = progress
            task.loss(None, task.collate([0, 1]), 0.1)
    finally:
        tasks.glancing_loss = original
    assert seen == pytest.approx([0.5, 0.4, 0.3])


def test_the_recipe_field_is_checked():
    assert TrainConfig(task="cmlm", glance=0.5, glance_end=0.3).glance == 0.5
    with pytest.raises(ValueError, match="glance: glancing training is for task cmlm"):
        TrainConfig(task="translation", glance=0.5)
    with pytest.raises(ValueError, match=r"glance_end: a share of the wrong predictions, in \[0, 1\]"):
        TrainConfig(task="cmlm", glance=0.5, glance_end=1.5)
