"""The main job for now: train a tiny encoder-decoder on the copy task and show what it learned."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm

from aiayn.data.synthetic import copy_batch
from aiayn.decoding import greedy_search
from aiayn.decoding.ctc import best_path
from aiayn.decoding.mask_predict import mask_predict
from aiayn.model.build import build_model
from aiayn.model.config import ModelConfig
from aiayn.model.nonautoregressive import CMLM, CTC
from aiayn.model.transformer import EncoderDecoder
from aiayn.training.objective import (
    cmlm_loss,
    ctc_loss,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    shift_target,
)


@dataclass(frozen=True)
class CopyRecipe:
    """Hyper-parameters of the copy-task demo (a few hundred steps on a CPU)."""

    steps: int = 2000
    batch: int = 64
    vocab_size: int = 20
    warmup: int = 200
    lr_factor: float = 0.5
    label_smoothing: float = 0.0
    seed: int = 0
    cmlm: bool = False  # Mask-Predict's conditional masked LM instead of the autoregressive decoder
    ctc: int = 0  # a CTC model reading the source upsampled this many times instead (0: none)


def copy_config(recipe: CopyRecipe) -> ModelConfig:
    kind = "cmlm" if recipe.cmlm else "ctc" if recipe.ctc else "autoregressive"
    return ModelConfig.preset("tiny", vocab_size=recipe.vocab_size, dropout=0.0, max_len=64, kind=kind,
                              ctc_upsample=recipe.ctc or None)


def train_copy(recipe: CopyRecipe = CopyRecipe(), progress: bool = True,
               after_step: Callable[[int, EncoderDecoder], None] | None = None) -> EncoderDecoder:
    """Train a tiny encoder-decoder (or, with ``recipe.cmlm``, a CMLM; with ``recipe.ctc``, a CTC model) to
    copy random id sequences of length 5-10; ``after_step(step, model)`` is called after each step (to measure
    the model along the way: it may switch it to eval mode and back)."""
    torch.manual_seed(recipe.seed)
    gen = torch.Generator().manual_seed(recipe.seed)
    cfg = copy_config(recipe)
    model = build_model(cfg).train()
    opt = make_optimizer(model)
    bar = tqdm(range(1, recipe.steps + 1), desc="copy task", disable=not progress, unit="step")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = noam_lr(step, cfg.d_model, recipe.warmup, recipe.lr_factor)
        src, tgt = copy_batch(cfg, recipe.batch, gen)
        loss = copy_loss(model, src, tgt, recipe, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{opt.param_groups[0]['lr']:.2e}")
        if after_step is not None:
            after_step(step, model)
    return model.eval()


def copy_loss(model: EncoderDecoder, src: torch.Tensor, tgt: torch.Tensor, recipe: CopyRecipe,
              gen: torch.Generator) -> torch.Tensor:
    """Teacher forcing's mean cross-entropy (section 5), a CMLM's masked-token loss per masked token, or a CTC
    model's loss per target token (the last two on the target without ``<s>`` and ``</s>``)."""
    cfg = model.config
    if not isinstance(model, (CMLM, CTC)):
        tgt_in, labels = shift_target(tgt, cfg.pad_id, cfg.eos_id)
        return label_smoothed_cross_entropy(model(src, tgt_in), labels, cfg.pad_id, recipe.label_smoothing)
    plain = tgt[:, 1:].masked_fill(tgt[:, 1:] == cfg.eos_id, cfg.pad_id)  # (B, S+1): no <s>, no </s>
    if isinstance(model, CMLM):
        loss, masked = cmlm_loss(model, cfg, src, plain, gen, recipe.label_smoothing)
        return loss / masked
    inputs = model.upsampled(src)  # (B, S * upsample)
    loss, tokens = ctc_loss(model(src, inputs), inputs, plain, cfg)
    return loss / tokens


def exact_match(model: EncoderDecoder, n: int = 1000, seed: int = 1234, iterations: int = 4,
                length_beam: int = 1) -> tuple[float, list]:
    """Decode ``n`` fresh copy examples (greedy; a CMLM with Mask-Predict: ``iterations`` passes over the
    ``length_beam`` likeliest lengths; a CTC model by its best path); return the exact-match rate and the
    (src, out) pairs."""
    gen = torch.Generator().manual_seed(seed)
    src, _ = copy_batch(model.config, n, gen)
    if isinstance(model, CMLM):
        outputs = mask_predict(model, src, iterations, length_beam)
    elif isinstance(model, CTC):
        outputs = best_path(model, src)
    else:
        outputs = greedy_search(model, src, max_new_tokens=src.size(1) + 2)
    sources = [[t for t in row if t != model.config.pad_id] for row in src.tolist()]
    hits = sum(out == s for out, s in zip(outputs, sources, strict=True))
    return hits / n, list(zip(sources, outputs, strict=True))


def run_demo(steps: int = CopyRecipe.steps, seed: int = 0) -> float:
    """Train on the copy task, print examples and the exact-match accuracy; return the accuracy."""
    start = time.perf_counter()
    model = train_copy(CopyRecipe(steps=steps, seed=seed))
    acc, pairs = exact_match(model)
    print(f"\ntrained {steps} steps in {time.perf_counter() - start:.1f}s")
    for s, out in pairs[:5]:
        print(f"  source {s}\n  output {out}  {'ok' if out == s else 'WRONG'}")
    print(f"exact match (greedy, 1000 new sequences): {acc:.1%}")
    return acc


NUMBERS_RECIPE = dict(data="numbers", preset="tiny", vocab_size=600, max_tokens=4096, schedule="inverse_sqrt",
                      lr=2e-3, warmup=300, max_steps=1500, eval_every=500, bleu_sentences=300, keep_last=0,
                      model={"dropout": 0.1}, log_every=100,
                      decoding={"beam_size": 1})  # greedy: validation chooses best/ as it then translates


def run_numbers_demo(output: str = "runs/demo", steps: int | None = None, seed: int = 0,
                     overwrite: bool = False) -> float:
    """Train on number -> English words, translate examples, print test sacreBLEU; return the BLEU. The run
    folder ``output`` starts afresh: an earlier demo's is replaced, any other folder refused unless ``overwrite``."""
    import shutil

    from aiayn.data.datasets import load_splits
    from aiayn.evaluation import score
    from aiayn.inference.translator import Translator
    from aiayn.io.files import claim_output, output_folder
    from aiayn.io.run import RUN_FILES
    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    recipe = {**NUMBERS_RECIPE, "output": output, "seed": seed}
    if steps is not None:
        recipe.update(max_steps=steps, eval_every=min(steps, NUMBERS_RECIPE["eval_every"]))
    shutil.rmtree(claim_output(output, "demo", overwrite=overwrite, own_files=RUN_FILES), ignore_errors=True)
    output_folder(output, "demo")
    start = time.perf_counter()
    Trainer(TrainConfig(**recipe)).train()
    test = load_splits("numbers", seed=seed).test
    translator = Translator.from_checkpoint(output)  # the run's decoding (greedy): the figures in README
    hyps = translator.translate(test.sources)
    print(f"\ntrained in {time.perf_counter() - start:.0f}s; checkpoint: {output}/best")
    for src, hyp, ref in list(zip(test.sources, hyps, test.targets, strict=True))[:6]:
        print(f"  {src:>9} -> {hyp}{'' if hyp == ref else f'   (reference: {ref})'}")
    result = score(hyps, test.targets)
    exact = sum(h == r for h, r in zip(hyps, test.targets, strict=True)) / len(hyps)
    print(f"test: sacreBLEU {result.bleu:.2f}, chrF {result.chrf:.2f}, exact match {exact:.1%} "
          f"on {len(hyps)} numbers\n  {result.bleu_signature}")
    print("next: train a real translator, e.g. German -> English on Multi30k:\n"
          "  aiayn train --config configs/multi30k-de-en.yaml --output runs/m30k")
    return result.bleu
