"""The objective of section 5, each piece against the formula written out or hand-computed values."""

import math

import pytest
import torch

from aiayn.training.objective import (
    inverse_sqrt_lr,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    shift_target,
    symmetric_kl,
)


def _smoothed_by_hand(logits: torch.Tensor, labels: torch.Tensor, pad_id: int, eps: float) -> torch.Tensor:
    """Section 5.4 written out: q = (1 - eps) one_hot + eps / V; loss_i = -sum_v q_v log p_v."""
    logp = logits.log_softmax(dim=-1)  # (B, T, V)
    vocab = logits.size(-1)
    q = torch.full_like(logp, eps / vocab).scatter_add(-1, labels[..., None], torch.full_like(logp[..., :1],
                                                                                            1 - eps))
    per_token = -(q * logp).sum(dim=-1)  # (B, T)
    keep = labels != pad_id
    return per_token[keep]


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_label_smoothing_equals_the_formula(eps):
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 11, dtype=torch.float64)
    labels = torch.randint(1, 11, (3, 5))
    labels[0, 3:] = 0  # padding is ignored
    expected = _smoothed_by_hand(logits, labels, 0, eps)
    mean = label_smoothed_cross_entropy(logits, labels, 0, eps)
    total = label_smoothed_cross_entropy(logits, labels, 0, eps, reduction="sum")
    assert mean.item() == pytest.approx(expected.mean().item(), rel=1e-6)
    assert total.item() == pytest.approx(expected.sum().item(), rel=1e-6)


def test_label_smoothing_floor_is_the_entropy_of_the_smoothed_target():
    """With the model predicting q exactly, the loss is H(q) > 0: smoothing never lets the loss reach 0."""
    vocab, eps = 5, 0.1
    q = torch.full((vocab,), eps / vocab)
    q[2] += 1 - eps
    loss = label_smoothed_cross_entropy(q.log().view(1, 1, vocab), torch.tensor([[2]]), pad_id=0, smoothing=eps)
    assert loss.item() == pytest.approx(-(q * q.log()).sum().item(), rel=1e-5) and loss.item() > 0
    with pytest.raises(ValueError, match="reduction"):
        label_smoothed_cross_entropy(q.view(1, 1, vocab), torch.tensor([[2]]), 0, reduction="none")


def test_noam_schedule_hand_computed():
    # d_model 512, warmup 4000: step 1 -> 512^-0.5 * 4000^-1.5; the peak at 4000 -> 512^-0.5 * 4000^-0.5
    assert noam_lr(1, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx(0.0006987712429686843)
    assert noam_lr(16000, 512, 4000) == pytest.approx(0.0006987712429686843 / 2)
    assert noam_lr(0, 512, 4000) == noam_lr(1, 512, 4000)
    assert noam_lr(4000, 512, 4000, factor=2.0) == pytest.approx(2 * noam_lr(4000, 512, 4000))


def test_inverse_sqrt_schedule_hand_computed():
    assert inverse_sqrt_lr(50, 1e-3, 100) == pytest.approx(5e-4)  # halfway up the warm-up
    assert inverse_sqrt_lr(100, 1e-3, 100) == pytest.approx(1e-3)  # the peak
    assert inverse_sqrt_lr(400, 1e-3, 100) == pytest.approx(5e-4)  # sqrt(100 / 400) = 1/2
    assert inverse_sqrt_lr(10_000, 1e-3, 100) == pytest.approx(1e-4)
    assert math.isclose(inverse_sqrt_lr(0, 1e-3, 100), 1e-5)


def test_shift_target_teacher_forcing():
    tgt = torch.tensor([[1, 7, 8, 2], [1, 9, 2, 0]])
    tgt_in, labels = shift_target(tgt, pad_id=0, eos_id=2)
    assert tgt_in.tolist() == [[1, 7, 8], [1, 9, 0]] and labels.tolist() == [[7, 8, 2], [9, 2, 0]]


def test_cosine_schedule_hand_computed():
    from aiayn.training.objective import constant_lr, cosine_lr

    assert constant_lr(50, 1e-3, 100) == pytest.approx(5e-4) and constant_lr(5000, 1e-3, 100) == 1e-3
    assert constant_lr(1, 1e-3, 1) == 1e-3  # no warm-up: the peak from the first step

    assert cosine_lr(50, 1e-3, 100, 1100) == pytest.approx(5e-4)  # warm-up
    assert cosine_lr(100, 1e-3, 100, 1100) == pytest.approx(1e-3)  # the peak
    assert cosine_lr(600, 1e-3, 100, 1100) == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # halfway down the cosine
    assert cosine_lr(1100, 1e-3, 100, 1100) == pytest.approx(1e-4) == cosine_lr(5000, 1e-3, 100, 1100)


def _tiny_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))


def test_the_fused_update_is_adam_as_section_5_3_writes_it():
    """m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, w -= lr m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps),
    written out, against make_optimizer's fused kernel over three steps."""
    net = _tiny_net()
    opt = make_optimizer(net, lr=0.01)
    assert opt.defaults["fused"]  # on CPU: torch's fused kernel
    w = {n: p.detach().clone() for n, p in net.named_parameters()}
    m, v = ({n: torch.zeros_like(p) for n, p in w.items()} for _ in range(2))
    x = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for t in range(1, 4):
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        for name, p in net.named_parameters():
            m[name] = 0.9 * m[name] + 0.1 * p.grad
            v[name] = 0.98 * v[name] + 0.02 * p.grad ** 2
            w[name] -= 0.01 * (m[name] / (1 - 0.9 ** t)) / ((v[name] / (1 - 0.98 ** t)).sqrt() + 1e-9)
        opt.step()
        for name, p in net.named_parameters():
            torch.testing.assert_close(p.detach(), w[name], rtol=0, atol=1e-6)


def test_weight_decay_shrinks_matrices_only_by_one_minus_lr_times_decay():
    net = _tiny_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    opt = make_optimizer(net, lr=0.1, weight_decay=0.5)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)  # a zero gradient: Adam's own update is 0, only the decay moves weights
    opt.step()
    for name, value in net.state_dict().items():
        factor = 1 - 0.1 * 0.5 if value.dim() >= 2 else 1.0  # embedding and linear weight; not bias, not norm
        torch.testing.assert_close(value, before[name] * factor, rtol=0, atol=1e-7)


def test_decoupled_decay_is_apart_from_the_adam_update():
    """AdamW: w' = w (1 - lr wd) - lr * adam_step(g), with adam_step the same as plain Adam's."""
    plain, decayed = _tiny_net(), _tiny_net()
    x = torch.tensor([[1, 2, 3], [4, 5, 6]])
    lr, wd = 0.01, 0.3
    opts = make_optimizer(plain, lr=lr), make_optimizer(decayed, lr=lr, weight_decay=wd)
    w0 = {k: v.clone() for k, v in plain.state_dict().items()}
    for net, opt in zip((plain, decayed), opts, strict=True):
        net(x).pow(2).sum().backward()
        opt.step()
    assert len(opts[0].param_groups) == 1 and opts[0].param_groups[0]["weight_decay"] == 0  # the paper's Adam
    for name, value in decayed.state_dict().items():
        adam_step = w0[name] - plain.state_dict()[name]
        factor = 1 - lr * wd if value.dim() >= 2 else 1.0
        torch.testing.assert_close(value, w0[name] * factor - adam_step, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="weight_decay"):
        make_optimizer(plain, weight_decay=-1.0)


def test_symmetric_kl_is_both_directions_summed_over_kept_positions():
    torch.manual_seed(0)
    p, q = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    keep = torch.tensor([[True, True, False], [True, False, False]])
    logp, logq = p.log_softmax(-1), q.log_softmax(-1)
    kl = (logp.exp() * (logp - logq)).sum(-1), (logq.exp() * (logq - logp)).sum(-1)  # (B, T): P||Q, Q||P
    by_hand = sum(kl[0][b, t] + kl[1][b, t] for b in range(2) for t in range(3) if keep[b, t])
    assert symmetric_kl(p, q, keep).item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert symmetric_kl(p, q, keep).item() == pytest.approx(symmetric_kl(q, p, keep).item(), rel=1e-6)
    assert symmetric_kl(p, p + 3.0, torch.ones(2, 3, dtype=torch.bool)).item() == pytest.approx(0.0, abs=1e-5)
    assert symmetric_kl(p, q, torch.zeros(2, 3, dtype=torch.bool)).item() == 0.0
