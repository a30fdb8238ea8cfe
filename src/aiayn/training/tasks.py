"""The training tasks over one loop: translation, Mask-Predict's conditional masked LM (CMLM), next-token LM,
and masked-token MLM.

A task turns data into batches (``batches(epoch)`` -> index lists, ``collate(indices)`` -> tensors) and a
batch into a summed loss and its number of predicted tokens (``loss``); the trainer normalises.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import torch
from torch import Tensor, nn

from aiayn.data.batching import lm_blocks, pad_batch, token_batches
from aiayn.data.corpus import Parallel
from aiayn.data.shards import ShardedPairs
from aiayn.model.config import FIRST_ORDINARY_ID, ModelConfig
from aiayn.tokenizers import TokenizerPair
from aiayn.training.objective import (
    cmlm_loss,
    ctc_glancing_loss,
    ctc_loss,
    glancing_loss,
    label_smoothed_cross_entropy,
    mask_targets,
    shift_target,
    symmetric_kl,
)


def summed_loss(logits: Tensor, labels: Tensor, pad_id: int, smoothing: float,
                padding_row: bool = False) -> tuple[Tensor, int]:
    """The summed label-smoothed loss of a batch and its number of predicted (non-pad) tokens. ``padding_row``:
    the last column is an imported vocabulary's appended padding row, left out of the softmax."""
    if padding_row:
        logits = logits[..., :-1]  # (B, T, V - 1): the checkpoint's own vocabulary
    loss = label_smoothed_cross_entropy(logits, labels, pad_id, smoothing, reduction="sum")
    return loss, int((labels != pad_id).sum())


def rdrop_loss(logits: Tensor, labels: Tensor, pad_id: int, smoothing: float, alpha: float) -> tuple[Tensor, int]:
    """R-Drop (Liang et al., 2021, equation 3) over a batch run twice: the two passes' summed label-smoothed
    losses plus alpha/2 times their symmetric KL, and the number of predictions of both passes (2n), so
    per prediction the loss is the mean cross-entropy plus alpha/4 times the summed KL of a token.

    Args:
        logits: (2B, T, V), rows B.. the second pass of rows ..B; labels: (B, T), PAD positions ignored.
    """
    loss, n = summed_loss(logits, labels.repeat(2, 1), pad_id, smoothing)  # (aiayn's own vocabularies only)
    first, second = logits.chunk(2)  # (B, T, V) each
    return loss + alpha / 2 * symmetric_kl(first, second, labels != pad_id), n


class TranslationTask:
    """Source -> target pairs for an encoder-decoder; pairs longer than ``max_len`` tokens are dropped.

    ``subword_dropout`` > 0 (BPE-dropout, Provilkov et al., 2020): every epoch segments the text afresh
    (SentencePiece's samples differ from process to process, so a resumed run continues with other samples,
    not bit for bit); a pair sampled longer than ``max_len`` keeps its plain segmentation. ``collate`` uses
    the epoch last planned by ``batches``.

    ``rdrop`` > 0 (R-Drop's alpha): every batch runs through the model twice, and the loss is
    :func:`rdrop_loss` (twice the compute per batch).
    """

    def __init__(self, pairs: Parallel, tokenizers: TokenizerPair, cfg: ModelConfig, max_len: int,
                 max_tokens: int, seed: int, subword_dropout: float = 0.0, rdrop: float = 0.0) -> None:
        self.cfg, self.max_tokens, self.seed, self.rdrop = cfg, max_tokens, seed, rdrop
        self.max_len, self.subword_dropout, self.tokenizers = max_len, subword_dropout, tokenizers
        src = tokenizers.src.encode_batch(pairs.sources)
        tgt = tokenizers.tgt.encode_batch(pairs.targets)
        keep = [i for i in range(len(src)) if 0 < len(src[i]) <= max_len and 0 < len(tgt[i]) <= max_len]
        self.too_long = len(src) - len(keep)
        self.src = self.plain_src = [src[i] for i in keep]
        self.tgt = self.plain_tgt = [[cfg.bos_id, *tgt[i], cfg.eos_id] for i in keep]
        if not self.src:
            raise ValueError(f"max_len: no training pairs left after filtering to {max_len} tokens per side")
        if subword_dropout:  # the kept pairs' text, segmented afresh each epoch
            self.texts = ([pairs.sources[i] for i in keep], [pairs.targets[i] for i in keep])

    def __len__(self) -> int:
        return len(self.src)

    def batches(self, epoch: int) -> list[list[int]]:
        if self.subword_dropout:
            self._resegment()
        return token_batches([len(s) for s in self.src], [len(t) for t in self.tgt], self.max_tokens,
                             self.seed, epoch)

    def _resegment(self) -> None:
        """A fresh BPE-dropout segmentation of both sides for the next epoch."""
        src = self.tokenizers.src.encode_batch(self.texts[0], self.subword_dropout)
        tgt = self.tokenizers.tgt.encode_batch(self.texts[1], self.subword_dropout)
        fits = [len(s) <= self.max_len and len(t) <= self.max_len for s, t in zip(src, tgt, strict=True)]
        self.src = [s if ok else plain for s, ok, plain in zip(src, fits, self.plain_src, strict=True)]
        self.tgt = [[self.cfg.bos_id, *t, self.cfg.eos_id] if ok else plain
                    for t, ok, plain in zip(tgt, fits, self.plain_tgt, strict=True)]

    def collate(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        return (pad_batch([self.src[i] for i in indices], self.cfg.pad_id),
                pad_batch([self.tgt[i] for i in indices], self.cfg.pad_id))

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor], smoothing: float) -> tuple[Tensor, int]:
        src, tgt = batch
        tgt_in, labels = shift_target(tgt, self.cfg.pad_id, self.cfg.eos_id)
        if self.rdrop:  # one forward pass over the batch twice: two dropout masks
            logits = model(src.repeat(2, 1), tgt_in.repeat(2, 1))  # (2B, T, V)
            return rdrop_loss(logits, labels, self.cfg.pad_id, smoothing, self.rdrop)
        return summed_loss(model(src, tgt_in), labels, self.cfg.pad_id, smoothing, self.cfg.padding_row)


class CMLMTask(TranslationTask):
    """Translation pairs for a conditional masked LM (Mask-Predict, Ghazvininejad et al., 2019, section 3): for
    each target of L tokens, k drawn uniformly from 1..L of them become ``<mask>`` and are predicted from the
    source and the rest of the target; the loss is over the masked tokens, plus ``length_weight`` times the
    length predictor's cross-entropy (the paper's length loss; fairseq weighs it 0.1). Targets carry no BOS or
    EOS. The masks are seeded by the batch's content, so a resumed run masks as the uninterrupted one."""

    length_weight = 0.1
    glance: tuple[float, float] | None = None  # glancing training (GLAT): the reveal ratio at the start and end
    progress = 0.0  # the share of training done (the trainer sets it before each step): anneals the ratio

    def collate(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        return (pad_batch([self.src[i] for i in indices], self.cfg.pad_id),
                pad_batch([self.tgt[i][1:-1] for i in indices], self.cfg.pad_id))  # (B, T): no BOS, no EOS

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor], smoothing: float) -> tuple[Tensor, int]:
        src, tgt = batch
        if self.glance is not None:
            return glancing_loss(model, self.cfg, src, tgt, self._generator(tgt), self.glance_ratio(), smoothing,
                                 self.length_weight)
        return cmlm_loss(model, self.cfg, src, tgt, self._generator(tgt), smoothing, self.length_weight)

    def glance_ratio(self) -> float:
        """Glancing's reveal ratio now: from its start to its end value, linearly in ``progress``."""
        start, end = self.glance
        return start + (end - start) * min(max(self.progress, 0.0), 1.0)

    def mask_targets(self, tgt: Tensor) -> tuple[Tensor, Tensor]:
        """This batch's masks (:func:`aiayn.training.objective.mask_targets`), as :meth:`loss` draws them."""
        return mask_targets(tgt, self.cfg.pad_id, self.cfg.mask_id, self._generator(tgt))

    def _generator(self, tgt: Tensor) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 7919 + int(tgt.sum()))


class CTCTask(CMLMTask):
    """Translation pairs for a CTC model (``aiayn.model.transformer.CTC``): targets without BOS or EOS, the loss
    :func:`~aiayn.training.objective.ctc_loss` (label smoothing is not applied to it), with ``glance`` through the
    best alignment. A pair whose upsampled source is too short for its target (fewer positions than tokens plus
    one blank between each two equal neighbours) has no alignment and is dropped (counted in ``too_long``)."""

    def __init__(self, pairs: Parallel, tokenizers: TokenizerPair, cfg: ModelConfig, max_len: int, *args,
                 **kwargs) -> None:
        super().__init__(pairs, tokenizers, cfg, max_len, *args, **kwargs)
        fits = [ctc_fits(len(s), t[1:-1], cfg.ctc_upsample) for s, t in zip(self.src, self.tgt, strict=True)]
        self.too_long += fits.count(False)
        self.src = self.plain_src = [s for s, ok in zip(self.src, fits, strict=True) if ok]
        self.tgt = self.plain_tgt = [t for t, ok in zip(self.tgt, fits, strict=True) if ok]
        if not self.src:
            raise ValueError(f"model.ctc_upsample: no training pair fits {cfg.ctc_upsample} positions per source "
                             "token; raise it")

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor], smoothing: float) -> tuple[Tensor, int]:
        src, tgt = batch
        if self.glance is not None:
            return ctc_glancing_loss(model, self.cfg, src, tgt, self._generator(tgt), self.glance_ratio())
        inputs = getattr(model, "module", model).upsampled(src)  # (B, U); DDP keeps the model on .module
        return ctc_loss(model(src, inputs), inputs, tgt, self.cfg)


def ctc_fits(src_len: int, tgt: list[int], upsample: int) -> bool:
    """Whether ``src_len * upsample`` positions can spell ``tgt`` under CTC: a position per token, and a blank
    between each two equal neighbours."""
    repeats = sum(a == b for a, b in pairwise(tgt))
    return src_len * upsample >= len(tgt) + repeats


class ShardedTranslationTask(TranslationTask):
    """:class:`TranslationTask` over a shards folder (``aiayn preprocess``): batches are planned from the
    pairs' lengths one window at a time and hold global pair numbers; tokens are read only for the batches
    this process trains on."""

    def __init__(self, folder: str, cfg: ModelConfig, max_len: int, max_tokens: int, seed: int,
                 rdrop: float = 0.0) -> None:
        self.cfg, self.max_len, self.max_tokens, self.seed, self.rdrop = cfg, max_len, max_tokens, seed, rdrop
        self.data = ShardedPairs(folder)
        self.too_long = self.data.too_long

    def __len__(self) -> int:
        return len(self.data)

    def batches(self, epoch: int) -> Iterator[list[int]]:
        return self.data.batches(epoch, self.max_len, self.max_tokens, self.seed)

    def collate(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        pairs, cfg = self.data.pairs(indices), self.cfg
        return (pad_batch([s for s, _ in pairs], cfg.pad_id),
                pad_batch([[cfg.bos_id, *t, cfg.eos_id] for _, t in pairs], cfg.pad_id))


def encode_lines(tokenizer, text: str) -> list[int]:
    """A text's ids, line by line with a newline piece between: every line is encoded as users' text is
    (a subword tokenizer marks its first word as a word start), and newlines stay in the stream."""
    newline = tokenizer.newline_ids()
    lines = tokenizer.encode_batch(text.split("\n"))
    return [t for i, ids in enumerate(lines) for t in (newline if i else []) + ids]


class BlockTask:
    """Text cut into blocks of ``block_size`` tokens: next-token prediction (``lm``) or masked tokens
    (``mlm``, BERT's 15% with 80% <mask> / 10% random / 10% kept).

    Blocks are laid end to end (consecutive blocks share one token: the last label of one is the first
    input of the next), so every token is predicted once per epoch; each epoch shuffles their order.
    """

    def __init__(self, texts: list[str], tokenizers: TokenizerPair, cfg: ModelConfig, block_size: int,
                 max_tokens: int, seed: int, masked: bool) -> None:
        self.cfg, self.seed, self.masked, self.block_size = cfg, seed, masked, block_size
        self.tokens = torch.tensor([t for text in texts for t in (*encode_lines(tokenizers.src, text), cfg.eos_id)],
                                   dtype=torch.long)  # (N,)
        self.blocks = lm_blocks(self.tokens, block_size, cfg.eos_id)  # (N, L+1)
        self.rows_per_batch = max(1, max_tokens // block_size)
        self.too_long = 0

    def __len__(self) -> int:
        return self.blocks.size(0)

    def batches(self, epoch: int) -> list[list[int]]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(len(self), generator=gen).tolist()
        return [order[i: i + self.rows_per_batch] for i in range(0, len(order), self.rows_per_batch)]

    def collate(self, indices: list[int]) -> Tensor:
        return self.blocks[indices]  # (B, L+1)

    def loss(self, model: nn.Module, batch: Tensor, smoothing: float) -> tuple[Tensor, int]:
        if not self.masked:
            return summed_loss(model(batch[:, :-1]), batch[:, 1:], self.cfg.pad_id, smoothing, self.cfg.padding_row)
        ids, labels = self.mask_tokens(batch[:, :-1], int(batch.sum()))
        return summed_loss(model(ids), labels, self.cfg.pad_id, smoothing, self.cfg.padding_row)

    @torch.no_grad()
    def masked_accuracy(self, model: nn.Module, batch: Tensor) -> tuple[int, int]:
        """(correct, total) arg-max predictions at the masked positions of a batch (mlm validation)."""
        ids, labels = self.mask_tokens(batch[:, :-1], int(batch.sum()))
        chosen = labels != self.cfg.pad_id
        return int((model(ids).argmax(dim=-1)[chosen] == labels[chosen]).sum()), int(chosen.sum())

    def mask_tokens(self, ids: Tensor, salt: int) -> tuple[Tensor, Tensor]:
        """BERT masking, seeded by the batch content so a resumed run masks the same way."""
        gen = torch.Generator().manual_seed(self.seed * 7919 + salt)
        chosen = torch.rand(ids.shape, generator=gen) < 0.15
        labels = ids.masked_fill(~chosen, self.cfg.pad_id)
        roll = torch.rand(ids.shape, generator=gen)
        random_ids = torch.randint(FIRST_ORDINARY_ID, self.cfg.vocab_size, ids.shape, generator=gen)
        ids = torch.where(chosen & (roll < 0.8), torch.full_like(ids, self.cfg.mask_id), ids)
        ids = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, ids)
        return ids, labels
