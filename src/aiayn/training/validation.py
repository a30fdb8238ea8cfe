"""The validation a run's checkpoints are chosen by: loss and perplexity, masked-token accuracy (mlm), and
sacreBLEU / chrF of the model's own translations (translation)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from aiayn.data.corpus import Parallel
from aiayn.evaluation import score
from aiayn.inference.translator import Translator
from aiayn.tokenizers import TokenizerPair
from aiayn.training.config import TrainConfig


def to_device(batch, device: torch.device):
    """A collated batch (a tensor, or a tuple of them) on ``device``."""
    return tuple(t.to(device) for t in batch) if isinstance(batch, tuple) else batch.to(device)


@torch.no_grad()
def validate(model, task, cfg: TrainConfig, valid: Parallel | None, tokenizers: TokenizerPair, device: torch.device,
             autocast: Callable[[], contextlib.AbstractContextManager]) -> dict:
    """Validation loss (no smoothing) and perplexity of ``model`` on ``task``'s batches; for translation also
    sacreBLEU and chrF on the first ``cfg.bleu_sentences`` of ``valid``, translated with the decoding the run's
    checkpoints ship (``cfg.decoding_config()``: best/ is chosen as it will translate); for mlm the masked-token
    accuracy (arg-max at the masked positions). ``model`` is left in eval mode."""
    model.eval()
    total, tokens = 0.0, 0
    for indices in task.batches(0):
        with autocast():
            loss, n = task.loss(model, to_device(task.collate(indices), device), 0.0)
        total, tokens = total + loss.item(), tokens + n
    nll = total / max(tokens, 1)
    result = {"valid_loss": round(nll, 4), "valid_ppl": round(math.exp(min(nll, 50)), 3)}
    if cfg.task == "mlm":
        counts = [task.masked_accuracy(model, to_device(task.collate(b), device)) for b in task.batches(0)]
        result["valid_mask_acc"] = round(sum(c for c, _ in counts) / max(sum(n for _, n in counts), 1), 4)
    if cfg.task in ("translation", "cmlm", "ctc") and cfg.bleu_sentences > 0:
        n = cfg.bleu_sentences
        hyps = Translator(model, tokenizers, device, cfg.decoding_config()).translate(valid.sources[:n])
        scores = score(hyps, valid.targets[:n], "zh" if cfg.tgt_lang == "zh" else None)
        result.update(valid_bleu=round(scores.bleu, 2), valid_chrf=round(scores.chrf, 2))
    return result
