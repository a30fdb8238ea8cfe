"""Training tasks: batches, the summed loss and its token count, BERT masking, length filtering."""

import pytest
import torch

from aiayn.data.corpus import Parallel
from aiayn.model.build import build_model
from aiayn.model.config import FIRST_ORDINARY_ID, MASK_ID
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer
from aiayn.training.objective import label_smoothed_cross_entropy, shift_target
from aiayn.training.tasks import BlockTask, TranslationTask

from conftest import tiny

TEXTS = ["a b c d e f", "g h i j", "b a d c", "e f g h i j a"] * 30


@pytest.fixture(scope="module")
def tokenizers():
    return SentencePiecePair(SentencePieceTokenizer.train(TEXTS, vocab_size=280))


def test_translation_task_filters_long_pairs_and_counts_tokens(tokenizers):
    cfg = tiny(vocab_size=len(tokenizers.src))
    pairs = Parallel([*TEXTS[:8], "a " * 50], [*TEXTS[:8], "b"])
    task = TranslationTask(pairs, tokenizers, cfg, max_len=20, max_tokens=64, seed=0)
    assert len(task) == 8 and task.too_long == 1
    batches = task.batches(0)
    assert sorted(i for b in batches for i in b) == list(range(8))
    model = torch.nn.Module()
    model.forward = lambda src, tgt_in: torch.zeros(*tgt_in.shape, cfg.vocab_size)  # uniform predictions
    loss, n = task.loss(model, task.collate(batches[0]), smoothing=0.0)
    _, tgt = task.collate(batches[0])
    assert n == int((tgt[:, 1:] != 0).sum())
    assert loss.item() == pytest.approx(n * torch.log(torch.tensor(float(cfg.vocab_size))).item(), rel=1e-5)
    with pytest.raises(ValueError, match="max_len"):
        TranslationTask(Parallel(["a " * 50], ["b " * 50]), tokenizers, cfg, max_len=5, max_tokens=64, seed=0)


def test_rdrop_runs_the_batch_twice_and_adds_half_alpha_times_the_symmetric_kl(tokenizers):
    cfg = tiny(vocab_size=len(tokenizers.src))
    task = TranslationTask(Parallel(TEXTS[:8], TEXTS[8:16]), tokenizers, cfg, max_len=20, max_tokens=64, seed=0,
                           rdrop=4.0)
    src, tgt = task.collate(task.batches(0)[0])
    labels = tgt[:, 1:]
    torch.manual_seed(0)
    scripted = torch.randn(*labels.shape, cfg.vocab_size)  # the second pass's scores; the first pass: uniform
    seen = []

    def forward(src_in, tgt_in):
        seen.append((src_in, tgt_in))
        return torch.cat([torch.zeros_like(scripted), scripted])  # (2B, T, V)

    model = torch.nn.Module()
    model.forward = forward
    loss, n = task.loss(model, (src, tgt), smoothing=0.1)
    (src2, tgt_in2), = seen
    assert torch.equal(src2, torch.cat([src, src])) and torch.equal(tgt_in2[: len(src)], tgt_in2[len(src):])
    n1 = int((labels != 0).sum())
    assert n == 2 * n1
    ce = label_smoothed_cross_entropy(torch.zeros_like(scripted), labels, 0, 0.1, "sum") + \
        label_smoothed_cross_entropy(scripted, labels, 0, 0.1, "sum")
    uniform = torch.full((cfg.vocab_size,), 1.0 / cfg.vocab_size)
    q = scripted.softmax(-1)
    kl = ((uniform - q) * (uniform.log() - q.log())).sum(-1)[labels != 0].sum()  # (P - Q)(log P - log Q)
    assert loss.item() == pytest.approx((ce + 4.0 / 2 * kl).item(), rel=1e-5)


def test_rdrop_of_a_model_without_dropout_is_twice_the_plain_loss(tokenizers):
    cfg = tiny(vocab_size=len(tokenizers.src))
    plain = TranslationTask(Parallel(TEXTS[:8], TEXTS[8:16]), tokenizers, cfg, max_len=20, max_tokens=64, seed=0)
    rdrop = TranslationTask(Parallel(TEXTS[:8], TEXTS[8:16]), tokenizers, cfg, max_len=20, max_tokens=64, seed=0,
                            rdrop=5.0)
    model = build_model(cfg)
    batch = plain.collate(plain.batches(0)[0])
    (loss, n), (loss2, n2) = plain.loss(model, batch, 0.1), rdrop.loss(model, batch, 0.1)
    assert n2 == 2 * n and loss2.item() == pytest.approx(2 * loss.item(), rel=1e-5)
    dropped, outputs = build_model(tiny(vocab_size=len(tokenizers.src), dropout=0.3)), []
    dropped.register_forward_hook(lambda module, args, out: outputs.append(out))
    loss3, _ = rdrop.loss(dropped, batch, 0.1)
    loss3.backward()  # two dropout masks: the KL term is positive, and gradients reach every weight
    ce = label_smoothed_cross_entropy(outputs[0], shift_target(batch[1], 0, cfg.eos_id)[1].repeat(2, 1), 0, 0.1,
                                      "sum")
    assert loss3.item() > ce.item() + 1e-3
    assert all(p.grad is not None for p in dropped.parameters())


def test_bpe_dropout_segments_each_epoch_afresh(tokenizers):
    cfg = tiny(vocab_size=len(tokenizers.src))
    pairs = Parallel(TEXTS[:40], TEXTS[40:80])
    plain = TranslationTask(pairs, tokenizers, cfg, max_len=20, max_tokens=64, seed=0)
    task = TranslationTask(pairs, tokenizers, cfg, max_len=20, max_tokens=64, seed=0, subword_dropout=0.2)
    assert task.batches(0) and task.src != plain.src and task.tgt != plain.tgt
    decode = tokenizers.src.decode
    assert [decode(s) for s in task.src] == [decode(s) for s in plain.src]  # the same text, cut finer
    assert [decode(t) for t in task.tgt] == [decode(t) for t in plain.tgt]
    assert all(t[0] == cfg.bos_id and t[-1] == cfg.eos_id for t in task.tgt)
    epoch0 = task.src
    task.batches(1)
    assert task.src != epoch0
    assert sorted(i for b in task.batches(2) for i in b) == list(range(len(task)))  # every pair, once
    short = TranslationTask(pairs, tokenizers, cfg, max_len=max(map(len, plain.src + plain.tgt)), max_tokens=64,
                            seed=0, subword_dropout=0.5)
    short.batches(0)
    assert all(len(s) <= short.max_len for s in short.src)  # sampled too long: the plain segmentation
    assert any(s == p for s, p in zip(short.src, plain.src, strict=True))


def test_masking_follows_bert_proportions_and_repeats_for_the_same_batch(tokenizers):
    cfg = tiny(arch="encoder-only", vocab_size=len(tokenizers.src))
    task = BlockTask(TEXTS, tokenizers, cfg, block_size=16, max_tokens=256, seed=0, masked=True)
    ids = torch.randint(FIRST_ORDINARY_ID, cfg.vocab_size, (64, 64))
    masked, labels = task.mask_tokens(ids, salt=7)
    chosen = labels != cfg.pad_id
    assert 0.12 < chosen.float().mean() < 0.18  # 15% predicted
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(masked[~chosen], ids[~chosen])
    share_mask = (masked[chosen] == MASK_ID).float().mean()
    assert 0.7 < share_mask < 0.9  # 80% of them become <mask>
    again, _ = task.mask_tokens(ids, salt=7)
    assert torch.equal(again, masked)


def test_blocks_cover_the_text_once_and_every_epoch_reorders_them(tokenizers):
    cfg = tiny(arch="decoder-only", vocab_size=len(tokenizers.src))
    task = BlockTask(["a b c d e f g h i j " * 30], tokenizers, cfg, block_size=16, max_tokens=64, seed=0,
                     masked=False)
    assert task.blocks[0, 0] == task.tokens[0]
    assert torch.equal(task.blocks[1:, 0], task.blocks[:-1, -1])  # end to end: every label predicted once
    first, second = task.batches(0), task.batches(1)
    assert sorted(i for b in first for i in b) == list(range(len(task))) and first != second
    assert task.batches(1) == second  # the same epoch, the same batches (exact resume)
