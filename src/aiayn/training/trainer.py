"""One training loop for translation, lm and mlm (section 5), resumable bit for bit, DDP-ready."""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError
from tqdm import tqdm

from aiayn.io.files import recover
from aiayn.io.run import RunFolder
from aiayn.model.build import build_model, load_model
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import TokenizerPair, load_tokenizers
from aiayn.training import distributed, finetune, memory, strategy
from aiayn.training.build import (
    PRECISION_NAMES,
    autocast_dtype,
    build_task,
    build_tokenizers,
    build_train_task,
    learning_rate,
    load_data,
    model_config,
    pick_device,
)
from aiayn.training.config import TrainConfig
from aiayn.training.objective import make_optimizer
from aiayn.training.pace import AutoSteps, pace_window, steps_held
from aiayn.training.runlog import RunLog
from aiayn.training.state import load_trainer_state, optimizer_state, restore_rng, save_evaluated
from aiayn.training.validation import to_device, validate


class Trainer:
    """Train the model a recipe describes, writing RUN/{last,best,checkpoints/step_N}/ and metrics.jsonl."""

    def __init__(self, cfg: TrainConfig, resume: bool = False) -> None:
        self.cfg, self.out, self.run = cfg, Path(cfg.output), RunFolder(cfg.output)
        self.generation = cfg.generation()  # the decoding defaults every checkpoint carries
        self.dist, self.device = distributed.start(pick_device(cfg.device))
        if cfg.subword_dropout and self.dist.enabled:  # each rank would plan its own batches: a hang
            raise ValueError("subword_dropout: one process only (SentencePiece samples differ per process)")
        self.strategy = strategy.choose(cfg.fsdp, self.dist)  # plain, DDP or FSDP: asked from here on
        if self.dist.main:
            self._tidy(resume)
        self.runlog = RunLog(self.run, self.dist.main)
        torch.manual_seed(cfg.seed)
        self.splits = load_data(cfg)
        self.model, self.tokenizers = self._start_model(resume)
        finetune.freeze(self.model, cfg.freeze)
        self.model.train()
        self.plain = self.model  # the unsharded model that validates and is saved (rank 0)
        self.net = self.strategy.wrap(self.model, self.device)  # what the loss runs through
        self.task = build_train_task(cfg, self.splits, self.tokenizers, self.model.config)
        self.valid_task = build_task(cfg, self.splits.valid, self.tokenizers, self.model.config, shuffle_seed=0)
        self.optimizer = make_optimizer(self.model, weight_decay=cfg.weight_decay)
        self.max_steps = cfg.max_steps  # the recipe's, or what auto_steps chose (the recipe stays as given)
        self.step, self.epoch, self.batch_pos, self.train_seconds = 0, 0, 0, 0.0
        self.best, self.bad_evals = -math.inf, 0
        self.stopped_by_signal = False
        if resume:
            self._restore()
        self.auto = AutoSteps(cfg.warmup, self.step, self.train_seconds) if cfg.auto_steps else None
        self.amp = autocast_dtype(cfg.precision, self.device)
        if not resume:
            self._log_data()
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == torch.float16)

    def _tidy(self, resume: bool) -> None:
        """Undo what a kill left: half-written checkpoint folders; on a fresh start, the metrics of a run
        that never reached its first checkpoint."""
        for folder in (self.run.path, self.run.checkpoints):
            recover(folder)
        if not resume:
            self.run.metrics.unlink(missing_ok=True)

    def _start_model(self, resume: bool) -> tuple[TransformerModel, TokenizerPair]:
        """The model and tokenizers a run starts from: its last checkpoint, a base model (fine-tuning, or a
        LoRA run resumed: its checkpoints hold the adapter alone), or new ones the recipe describes."""
        if resume and not self.cfg.lora_r:
            return load_model(self.run.last), load_tokenizers(self.run.last)
        if self.cfg.init_from:
            return finetune.start(self.cfg, self.run, self.splits, resume, self.dist.main)
        tokenizers = self._shared_tokenizers()
        return build_model(model_config(self.cfg, tokenizers)), tokenizers

    def _shared_tokenizers(self) -> TokenizerPair:
        """Rank 0 trains (or loads) the tokenizer and writes it to RUN/tokenizer/; the other ranks read it."""
        folder = self.run.tokenizer
        if self.dist.main:
            folder.mkdir(parents=True, exist_ok=True)
            build_tokenizers(self.cfg, self.splits).save(folder)
        if self.dist.enabled:
            torch.distributed.barrier()
        return load_tokenizers(folder)

    @property
    def _adapter(self) -> dict:
        """How a LoRA run's checkpoints are written: the adapter alone, naming its base."""
        return finetune.adapter_options(self.cfg)

    def _restore(self) -> None:
        meta, tensors = load_trainer_state(self.run.last)
        self.strategy.load_optimizer(self.model, self.optimizer, optimizer_state(tensors, meta))
        restore_rng(tensors)
        self.step, self.epoch, self.batch_pos = meta["step"], meta["epoch"], meta["batch_pos"]
        self.best, self.bad_evals = meta["best"], meta["bad_evals"]
        self.train_seconds = meta["train_seconds"]
        self.runlog.truncate(self.step)
        chose = meta["recipe"].get("auto_steps") and self.step >= pace_window(self.cfg.warmup)[1]
        if self.cfg.auto_steps and chose:  # the step count an auto_steps run chose is part of its state
            self.max_steps = meta.get("max_steps", meta["recipe"]["max_steps"])  # (older runs wrote it there)

    def _log_data(self) -> None:
        """Report what the data cleaning dropped, the allocator and the precision (metrics.jsonl, console)."""
        dropped = {"train_pairs": len(self.task), "empty_skipped": self.splits.train.dropped.get("empty", 0),
                   "too_long_filtered": self.task.too_long, "max_len": self.cfg.max_len}
        self.runlog.start(dropped, memory.allocator(), PRECISION_NAMES[self.amp],
                          emulated=self.cfg.precision == "bf16" and self.amp is None)

    def lr(self, step: int) -> float:
        return learning_rate(self.cfg, self.model.config.d_model, step, self.max_steps)

    def _rank_batches(self, epoch: int) -> Iterator[list[int]]:
        return distributed.rank_share(self.task.batches(epoch), self.dist)

    def _next_window(self, batches: Iterator[list[int]]) -> tuple[list[list[int]], Iterator[list[int]]]:
        window = []
        while len(window) < self.cfg.accum:
            batch = next(batches, None)
            if batch is None:  # the epoch is over
                self.epoch, self.batch_pos = self.epoch + 1, 0
                batches = self._rank_batches(self.epoch)
                continue
            window.append(batch)
            self.batch_pos += 1
        return window, batches

    def train_step(self, window: list[list[int]]) -> tuple[float, int]:
        """Forward/backward over the accumulation window; loss normalised by the global token count."""
        total_loss, tokens = 0.0, 0
        self.task.progress = self.step / max(self.max_steps, 1)  # annealed options (glancing) read it
        for i, indices in enumerate(window):
            batch = to_device(self.task.collate(indices), self.device)
            last = i == len(window) - 1  # the window's gradients are reduced at its last backward
            with (contextlib.nullcontext() if last else self.strategy.no_sync(self.net)), self._autocast():
                loss, n = self.task.loss(self.net, batch, self.cfg.label_smoothing)
            self.scaler.scale(loss).backward()
            total_loss, tokens = total_loss + loss.item(), tokens + n
        global_tokens = distributed.all_sum(tokens, self.dist, self.device)
        self.scaler.unscale_(self.optimizer)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(self.dist.world / max(global_tokens, 1))
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return total_loss / max(tokens, 1), tokens

    def _autocast(self):
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp)

    def train(self) -> dict:
        """Run until max_steps, the time limit, early stopping or SIGTERM (then it saves ``last/`` after the
        current step and sets ``stopped_by_signal``); return the last evaluation."""
        cfg = self.cfg
        batches = itertools.islice(self._rank_batches(self.epoch), self.batch_pos, None)  # resume mid-epoch
        bar = tqdm(total=self.max_steps, initial=self.step, disable=not self.dist.main, unit="step",
                   dynamic_ncols=True, mininterval=2.0, desc=f"train {cfg.task}")
        try:
            with distributed.sigterm_flag() as sigterm:
                last_eval = self._loop(bar, batches, sigterm)
        finally:
            bar.close()  # before any error message, which must be the last line
        distributed.teardown(self.dist)
        return last_eval

    def _loop(self, bar: tqdm, batches: Iterator[list[int]], sigterm: threading.Event) -> dict:
        cfg = self.cfg
        last_eval, window_tokens, window_start = {}, 0, time.perf_counter()
        while self.step < self.max_steps and not self._out_of_time():
            started = time.perf_counter()
            window, batches = self._next_window(batches)
            self.step += 1
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr(self.step)
            loss, tokens = self.train_step(window)
            report = self.strategy.report(self.model, self.optimizer) if self.step == 1 else None
            if report:  # FSDP: what rank 0 holds of the sharded model and optimizer state
                self.runlog.write({"step": 1, **report})
            if self.step % memory.EVERY == 0:
                memory.release_free_memory()  # resident memory stays flat over ever-new batch shapes
            self.train_seconds += time.perf_counter() - started
            if self.auto is not None:
                self._fit_steps(bar)
            window_tokens += tokens
            bar.update(1)
            if self.step % cfg.log_every == 0:
                rate = window_tokens * self.dist.world / (time.perf_counter() - window_start)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{self.lr(self.step):.2e}", tok_s=f"{rate:.0f}")
                self.runlog.write({"step": self.step, "time_min": round(self.train_seconds / 60, 3), "loss": loss,
                          "lr": self.lr(self.step), "tokens_per_s": round(rate, 1), "rss_mb": memory.resident_mb()})
                window_tokens, window_start = 0, time.perf_counter()
            if self._told_to_stop(sigterm):
                return self._stop_on_signal(bar)
            if self.step % cfg.eval_every == 0:
                last_eval = self.evaluate_and_save()
                if cfg.patience and self.bad_evals >= cfg.patience:
                    bar.write(f"early stopping: no improvement in {cfg.patience} evaluations")
                    return last_eval
        if self.step % cfg.eval_every:
            last_eval = self.evaluate_and_save()
        return last_eval

    def _stop_on_signal(self, bar: tqdm) -> dict:
        """SIGTERM: last/ saved after the current step, ``stopped_by_signal`` set."""
        optimizer = self._gather()
        if self.dist.main:
            self._save(False, optimizer)
        self.stopped_by_signal = True
        bar.write(f"SIGTERM: saved {self.run.last} at step {self.step}; continue with --resume")
        return {"step": self.step, "stopped_by": "SIGTERM"}

    def _told_to_stop(self, sigterm: threading.Event) -> bool:
        """Whether any process got SIGTERM (all of them then stop after the same step)."""
        return distributed.all_sum(float(sigterm.is_set()), self.dist, self.device) > 0

    def _out_of_time(self) -> bool:
        if self.auto is not None and self.auto.fixed(self.step):
            return False  # auto_steps: the chosen count rules, so that a rerun with it takes the same steps
        return bool(self.cfg.time_limit_min) and self.train_seconds >= self.cfg.time_limit_min * 60

    def _fit_steps(self, bar: tqdm) -> None:
        """auto_steps: when the pace window closes, max_steps becomes what time_limit_min holds (on every rank)."""
        pace = self.auto.observe(self.step, self.train_seconds)
        if pace is None:
            return
        pace = distributed.all_sum(pace, self.dist, self.device) / self.dist.world
        chosen = steps_held(self.step, self.train_seconds, pace, self.cfg.time_limit_min)
        self.max_steps = bar.total = chosen
        if self.dist.main:
            bar.write(f"auto_steps: {pace:.3f} s a step, {self.cfg.time_limit_min:g} minutes hold {chosen} steps")
        self.runlog.write({"step": self.step, "max_steps": chosen, "seconds_per_step": round(pace, 4)})

    def evaluate_and_save(self) -> dict:
        """Validation metrics, then last/ (resumable), checkpoints/step_N/ and best/ (rank 0 writes)."""
        result, optimizer = {}, self._gather()
        if self.dist.main:
            self.plain.to(self.device)
            result = {"step": self.step, "time_min": round(self.train_seconds / 60, 3), **self.validate()}
            self.runlog.write(result)
            metric = result.get("valid_bleu", -result["valid_loss"])
            improved = metric > self.best
            self.best, self.bad_evals = (metric, 0) if improved else (self.best, self.bad_evals + 1)
            self._save(improved, optimizer)
            tqdm.write(" ".join(f"{k}={v}" for k, v in result.items()))
        self.bad_evals = int(distributed.all_sum(self.bad_evals if self.dist.main else 0, self.dist))
        self.model.train()
        return result

    def _gather(self) -> dict:
        """The full weights in rank 0's plain model (FSDP: gathered from the shards); the full optimizer state."""
        self.plain, optimizer = self.strategy.gather(self.model, self.optimizer)
        return optimizer

    def _save(self, improved: bool, optimizer: dict) -> None:
        """step_N/ and best/ first, last/ (what --resume reads) at the end: a kill in between resumes from
        the previous last/ and writes this step's folders again. A failed write (a full disk) leaves every
        previous folder whole and stops training with a message. FSDP: rank 0's plain model then gives its
        storage back until the next evaluation."""
        state = {"step": self.step, "epoch": self.epoch, "batch_pos": self.batch_pos, "best": self.best,
                 "bad_evals": self.bad_evals, "train_seconds": self.train_seconds, "max_steps": self.max_steps,
                 "recipe": self.cfg.to_dict()}
        try:
            save_evaluated(self.run, self.plain, self.tokenizers, optimizer, state, self.generation,
                           self.cfg.keep_last, improved, **self._adapter)
        except (OSError, SafetensorError) as err:  # safetensors reports its own I/O errors
            reason = getattr(err, "strerror", None) or str(err).split(": ")[-1]
            raise ValueError(f"{self.out}: could not write the step {self.step} checkpoint ({reason}); "
                             f"{self.run.last} still holds the previous one: free space, then continue with "
                             "--resume") from None
        finally:
            self.strategy.saved()

    def validate(self) -> dict:
        """The validation metrics of the plain (unsharded) model: ``training/validation.py``."""
        return validate(self.plain, self.valid_task, self.cfg, self.splits.valid, self.tokenizers, self.device,
                        self._autocast)
