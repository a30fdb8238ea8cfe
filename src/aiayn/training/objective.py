"""The training objective of section 5: label-smoothed cross-entropy, Adam, and the learning-rate
schedules, each a pure function (tested directly against hand-computed values)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

REDUCTIONS = ("mean", "sum")


def label_smoothed_cross_entropy(logits: Tensor, labels: Tensor, pad_id: int, smoothing: float = 0.0,
                                 reduction: str = "mean") -> Tensor:
    """Label smoothing (section 5.4): cross-entropy against the target distribution
    q = (1 - eps) * one_hot(label) + eps / V, over the labels that are not PAD.

    Args:
        logits: (B, T, V) scores; labels: (B, T) ids, PAD positions ignored.
        smoothing: eps (the paper uses 0.1); 0 is plain cross-entropy.
        reduction: ``mean`` over the non-pad labels, or their ``sum`` (the trainer normalises by the
            global token count itself).
    Returns:
        a scalar, computed in float32 whatever the logits' dtype.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: unknown value {reduction!r}; choose mean or sum")
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=pad_id,
                           label_smoothing=smoothing, reduction=reduction)


def symmetric_kl(logits: Tensor, other: Tensor, keep: Tensor) -> Tensor:
    """R-Drop's consistency term (Liang et al., 2021, equation 2): KL(P1 || P2) + KL(P2 || P1) between two
    predictions of the same tokens, summed over the positions where ``keep`` is True.

    Args:
        logits, other: (B, T, V) scores of two forward passes (different dropout masks).
        keep: (B, T) bool, True = a real (non-pad) label.
    Returns:
        a scalar in float32.
    """
    logp, logq = logits.float().log_softmax(-1), other.float().log_softmax(-1)  # (B, T, V) each
    both = ((logp.exp() - logq.exp()) * (logp - logq)).sum(-1)  # (B, T): sum_v (p - q)(log p - log q)
    return both.masked_fill(~keep, 0.0).sum()


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """Equation (3): lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` at ``warmup`` steps, then peak * sqrt(warmup / step) (fairseq's
    inverse_sqrt; the same shape as equation (3), parametrised by its peak)."""
    step = max(step, 1)
    return peak * min(step / warmup, (warmup / step) ** 0.5)


def constant_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak``, then ``peak`` for good: with ``warmup`` 1 the rate is the peak from the
    first step, so warm-up alone differs (the training-stability question)."""
    return peak * min(1.0, max(step, 1) / warmup)


def cosine_lr(step: int, peak: float, warmup: int, total: int, floor: float = 0.1) -> float:
    """Linear warm-up to ``peak``, then a half cosine down to ``floor * peak`` at step ``total`` (and flat
    after): the schedule of GPT-style language models (nanoGPT's)."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: nn.Module, lr: float = 1.0, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with beta1 0.9, beta2 0.98, eps 1e-9 (section 5.3).

    ``weight_decay`` > 0 adds decoupled weight decay (AdamW: each step multiplies a weight by
    1 - lr * weight_decay, apart from the gradient's update) to the weight matrices and embeddings only;
    biases and norm gains are not decayed. 0 is the paper's plain Adam, with a single parameter group.
    Frozen parameters (``requires_grad`` False) are left out. On CPU and CUDA the update is torch's fused
    kernel: the same update, one pass over each tensor (benchmarks/bench_optimizer.py).
    """
    params = [p for p in model.parameters() if p.requires_grad]  # frozen parts (fine-tuning) keep no state
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    if weight_decay == 0:
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    groups = [{"params": [p for p in params if p.dim() >= 2]},  # the default weight_decay (torch checks it)
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.Adam(groups, lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay,
                            decoupled_weight_decay=True, fused=fused)


def shift_target(tgt: Tensor, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
    """Teacher forcing: ``<s> y1 .. yn </s>`` (B, T+1) -> decoder input ``<s> y1 .. yn`` and labels
    ``y1 .. yn </s>``, both (B, T). The input's EOS (of the longest rows) becomes PAD."""
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == eos_id, pad_id)  # (B, T)
    return tgt_in, tgt[:, 1:]


def mask_targets(tgt: Tensor, pad_id: int, mask_id: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Mask-Predict's training masks (Ghazvininejad et al., 2019, section 3): for a target row of L tokens (B, T),
    k drawn uniformly from 1..L of them become ``mask_id``. Returns (masked targets, labels): the labels hold the
    original tokens at the masked positions and ``pad_id`` elsewhere (ignored by the loss)."""
    real = tgt != pad_id  # (B, T)
    lengths = real.sum(dim=1)  # (B,)
    k = (torch.rand(lengths.shape, generator=gen).to(tgt.device) * lengths).long() + 1  # (B,) in 1..L
    scores = torch.rand(tgt.shape, generator=gen).to(tgt.device).masked_fill(~real, 2.0)  # padding ranks last
    ranks = scores.argsort(dim=1).argsort(dim=1)  # (B, T): each position's rank
    chosen = (ranks < k[:, None]) & real
    return tgt.masked_fill(chosen, mask_id), tgt.masked_fill(~chosen, pad_id)


def cmlm_loss(model: nn.Module, cfg, src: Tensor, tgt: Tensor, gen: torch.Generator, smoothing: float = 0.0,
              length_weight: float = 0.1) -> tuple[Tensor, int]:
    """A CMLM's summed loss on a batch (targets without BOS/EOS; ``cfg`` its ModelConfig, ``model`` it or its
    DDP wrapper): label-smoothed cross-entropy at the masked positions plus ``length_weight`` times the length
    predictor's summed cross-entropy; and the number of masked tokens."""
    masked, labels = mask_targets(tgt, cfg.pad_id, cfg.mask_id, gen)
    logits, length_logits = model(src, masked, with_length=True)  # (B, T, V), (B, max_len + 1)
    loss = label_smoothed_cross_entropy(logits, labels, cfg.pad_id, smoothing, reduction="sum")
    lengths = (tgt != cfg.pad_id).sum(dim=1)  # (B,)
    length_loss = F.cross_entropy(length_logits.float(), lengths, reduction="sum")
    return loss + length_weight * length_loss, int((labels != cfg.pad_id).sum())


def glance_positions(guess: Tensor, tgt: Tensor, pad_id: int, ratio: float, gen: torch.Generator) -> Tensor:
    """GLAT's glancing sampling (Qian et al., 2021, section 3): in each row, ``guess`` (B, T) (a first pass's
    predictions) got d of the reference ``tgt``'s (B, T) real tokens wrong; floor(ratio * d) positions, drawn
    uniformly among the real ones, are revealed. Returns them, (B, T) bool."""
    real = tgt != pad_id  # (B, T)
    wrong = ((guess != tgt) & real).sum(dim=1)  # (B,): d
    reveal = (wrong.float() * ratio).floor().long()  # (B,)
    keys = torch.rand(tgt.shape, generator=gen).to(tgt.device).masked_fill(~real, 2.0)  # padding sorts last
    ranks = keys.argsort(dim=1).argsort(dim=1)  # (B, T): each position's place in its row's random order
    return (ranks < reveal[:, None]) & real


def glance_targets(guess: Tensor, tgt: Tensor, pad_id: int, mask_id: int, ratio: float,
                   gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """A CMLM's glanced inputs: the reference at the :func:`glance_positions`, ``<mask>`` at the other real
    positions. Returns the decoder inputs and the labels (B, T) each: the reference where the loss is taken
    (the positions not revealed), ``pad_id`` elsewhere."""
    real = tgt != pad_id  # (B, T)
    revealed = glance_positions(guess, tgt, pad_id, ratio, gen)
    return tgt.masked_fill(real & ~revealed, mask_id), tgt.masked_fill(revealed, pad_id)


def glancing_loss(model: nn.Module, cfg, src: Tensor, tgt: Tensor, gen: torch.Generator, ratio: float,
                  smoothing: float = 0.0, length_weight: float = 0.1) -> tuple[Tensor, int]:
    """A CMLM's summed loss with glancing training (GLAT): a first pass without gradient from all-``<mask>``
    inputs, :func:`glance_targets` reveals ``ratio`` of its mistakes, a second pass is trained on the positions
    not revealed (label-smoothed cross-entropy) plus ``length_weight`` times the length loss, as
    :func:`cmlm_loss`; and the number of tokens the loss is taken on."""
    real = tgt != cfg.pad_id
    with torch.no_grad():
        guess = model(src, tgt.masked_fill(real, cfg.mask_id)).argmax(dim=-1)  # (B, T)
    inputs, labels = glance_targets(guess, tgt, cfg.pad_id, cfg.mask_id, ratio, gen)
    logits, length_logits = model(src, inputs, with_length=True)  # (B, T, V), (B, max_len + 1)
    loss = label_smoothed_cross_entropy(logits, labels, cfg.pad_id, smoothing, reduction="sum")
    length_loss = F.cross_entropy(length_logits.float(), real.sum(dim=1), reduction="sum")
    return loss + length_weight * length_loss, int((labels != cfg.pad_id).sum())


def ctc_loss(logits: Tensor, inputs: Tensor, tgt: Tensor, cfg) -> tuple[Tensor, int]:
    """Connectionist temporal classification (Graves et al., 2006) through ``torch.nn.functional.ctc_loss``: minus
    the log of the summed probability of every alignment of the upsampled positions that collapses (repeats
    merged, blanks dropped) to the reference. Summed over the batch; and the number of reference tokens.

    Args:
        logits: (B, U, V) one prediction per upsampled position; inputs: (B, U) the decoder's inputs (pad_id
            where a row is shorter); tgt: (B, T) references, pad_id after each; cfg: the ModelConfig.
    """
    log_probs = logits.float().log_softmax(dim=-1).transpose(0, 1)  # (U, B, V): the layout CTC takes
    in_lengths, tgt_lengths = (inputs != cfg.pad_id).sum(dim=1), (tgt != cfg.pad_id).sum(dim=1)  # (B,) each
    loss = F.ctc_loss(log_probs, tgt, in_lengths, tgt_lengths, blank=cfg.blank_id, reduction="sum",
                      zero_infinity=True)
    return loss, int(tgt_lengths.sum())


@torch.no_grad()
def ctc_alignment(log_probs: Tensor, in_lengths: Tensor, tgt: Tensor, tgt_lengths: Tensor, blank: int,
                  pad_id: int) -> Tensor:
    """The best CTC alignment (Viterbi): for each row, the label at every input position (a reference token or
    ``blank``) on the likeliest path that collapses to the reference; ``pad_id`` past the row's input length.

    Args:
        log_probs: (B, U, V); in_lengths: (B,) input positions per row; tgt: (B, T) references, tgt_lengths (B,).
    Returns:
        (B, U) labels.
    """
    batch, width = log_probs.shape[:2]
    labels = torch.full((batch, 2 * tgt.size(1) + 1), blank, dtype=torch.long, device=tgt.device)  # (B, L)
    labels[:, 1::2] = tgt  # blank y1 blank y2 ... yT blank
    emit = log_probs.gather(2, labels[:, None, :].expand(batch, width, labels.size(1)))  # (B, U, L)
    states = torch.arange(labels.size(1), device=tgt.device)
    valid = states < 2 * tgt_lengths[:, None] + 1  # (B, L)
    skip = (labels != blank) & (labels != labels.roll(2, dims=1)) & (states >= 2)  # y_{s-2} -> y_s allowed
    score = emit[:, 0].masked_fill((states > 1) | ~valid, float("-inf"))  # (B, L): a path starts at s 0 or 1
    moves = []
    for t in range(1, width):
        stay, one = score, F.pad(score, (1, 0), value=float("-inf"))[:, :-1]
        two = F.pad(score, (2, 0), value=float("-inf"))[:, :-2].masked_fill(~skip, float("-inf"))
        best, move = torch.stack([stay, one, two], dim=-1).max(dim=-1)  # (B, L) each: back 0, 1 or 2 states
        on = (t < in_lengths)[:, None]  # (B, 1): rows whose input is still running
        score = torch.where(on, (best + emit[:, t]).masked_fill(~valid, float("-inf")), score)
        moves.append(move)
    last = 2 * tgt_lengths  # (B,): the final blank; the path ends there or on the last token
    state = torch.where(score.gather(1, last[:, None])[:, 0] >= score.gather(1, (last - 1)[:, None])[:, 0],
                        last, last - 1)  # (B,)
    path = torch.full((batch, width), pad_id, dtype=torch.long, device=tgt.device)
    for t in range(width - 1, -1, -1):
        on = t < in_lengths  # (B,)
        path[:, t] = torch.where(on, labels.gather(1, state[:, None])[:, 0], path[:, t])
        if t:
            state = torch.where(on, state - moves[t - 1].gather(1, state[:, None])[:, 0], state)
    return path


def ctc_glancing_loss(model: nn.Module, cfg, src: Tensor, tgt: Tensor, gen: torch.Generator,
                      ratio: float) -> tuple[Tensor, int]:
    """Glancing training through the best alignment (GLAT + CTC, as Gu & Kong 2021 and DSLP do): a first pass
    without gradient, the reference's best alignment to it (:func:`ctc_alignment`), ``ratio`` of the positions
    where the pass's argmax differs from that alignment revealed (their aligned labels, a token or the blank,
    replace the decoder's inputs there), and :func:`ctc_loss` of a second pass on those inputs."""
    inner = getattr(model, "module", model)  # DDP's wrapper keeps the model's methods on .module
    inputs = inner.upsampled(src)  # (B, U)
    with torch.no_grad():
        logp = model(src, inputs).float().log_softmax(dim=-1)  # (B, U, V)
        aligned = ctc_alignment(logp, (inputs != cfg.pad_id).sum(dim=1), tgt, (tgt != cfg.pad_id).sum(dim=1),
                                cfg.blank_id, cfg.pad_id)  # (B, U)
        revealed = glance_positions(logp.argmax(dim=-1), aligned, cfg.pad_id, ratio, gen)
    glanced = torch.where(revealed, aligned, inputs)  # (B, U)
    return ctc_loss(model(src, glanced), glanced, tgt, cfg)
