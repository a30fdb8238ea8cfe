"""Building what a training run needs from its recipe: device, data, tokenizers, model config, task."""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.data.corpus import Parallel, both_directions, clean, read_lines, read_tsv, tagged, target_tag
from aiayn.data.datasets import Splits, load_splits, text_corpus
from aiayn.data.shards import is_shards, read_manifest
from aiayn.model.config import ModelConfig
from aiayn.model.cpu import native_bf16
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer, TokenizerPair, load_tokenizers
from aiayn.training.chat import ChatTask, read_conversations
from aiayn.training.config import TrainConfig
from aiayn.training.finetune import ARCH_OF_TASK
from aiayn.training.objective import constant_lr, cosine_lr, inverse_sqrt_lr, noam_lr
from aiayn.training.tasks import BlockTask, CMLMTask, CTCTask, ShardedTranslationTask, TranslationTask

PAIRED = ("translation", "cmlm", "ctc")  # the tasks that learn from source -> target pairs


def pick_device(name: str) -> torch.device:
    """``auto`` is cuda, then mps, then cpu."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name not in ("cpu", "cuda", "mps") and not name.startswith("cuda:"):
        raise ValueError(f"device: unknown value {name!r}; choose auto, cpu, cuda or mps")
    return torch.device(name)


PRECISION_NAMES = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}  # by autocast dtype


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain float32.

    CUDA: ``auto`` picks bf16 where supported, else fp16. CPU: float32 unless ``bf16`` is asked for (mixed
    precision) and this CPU computes in bfloat16 with its own instructions (``native_bf16``: AVX512-BF16, AMX or
    AVX-NE-CONVERT; elsewhere bfloat16 is converted or emulated, slower than float32: 2.45x a step on an AVX512
    Xeon without them, 32x on an AVX2 EPYC; the run trains in float32 and says so); fp16 autocast is CUDA only.
    """
    if precision == "fp32" or device.type not in ("cuda", "cpu"):
        return None
    if device.type == "cpu":
        if precision == "fp16":
            raise ValueError("precision: fp16 autocast needs a CUDA device; use bf16 or fp32 on CPU")
        return torch.bfloat16 if precision == "bf16" and native_bf16() else None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def learning_rate(cfg: TrainConfig, d_model: int, step: int, max_steps: int | None = None) -> float:
    """The recipe's schedule at ``step``: noam (equation 3), cosine, constant or inverse square root; ``max_steps``:
    the run's step count, where cosine ends (default the recipe's; auto_steps chooses another)."""
    if cfg.schedule == "noam":
        return noam_lr(step, d_model, cfg.warmup, cfg.lr_factor)
    if cfg.schedule == "cosine":
        return cosine_lr(step, cfg.lr, cfg.warmup, max_steps or cfg.max_steps)
    if cfg.schedule == "constant":
        return constant_lr(step, cfg.lr, cfg.warmup)
    return inverse_sqrt_lr(step, cfg.lr, cfg.warmup)


def load_data(cfg: TrainConfig) -> Splits:
    """Translation pairs, or (lm / mlm) the text file as one text, split by characters: the first 90%
    trains, the last 10% validates (the usual language-modelling split); newlines stay in the text."""
    if is_shards(cfg.data):
        if cfg.both_directions:
            raise ValueError(f"both_directions: {cfg.data} holds ids of one direction; train on the text")
        if cfg.task != "translation":
            raise ValueError(f"data: {cfg.data} holds preprocessed translation pairs; task {cfg.task} needs "
                             "text file")
        empty = read_manifest(cfg.data).get("empty", 0)  # the pairs are in the shards: nothing to hold here
        return Splits(Parallel([], [], {"empty": empty}), clean(read_tsv(Path(cfg.data) / "valid.tsv")))
    if cfg.task == "chat":
        return chat_splits(cfg)
    if cfg.task in PAIRED:
        splits = load_splits(cfg.data, cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.valid, cfg.seed,
                             cfg.synthetic_size)
        return tagged_both_ways(splits, cfg.src_lang, cfg.tgt_lang) if cfg.both_directions else splits
    text = "\n".join(read_lines(text_corpus(cfg.data, cfg.data_dir))) + "\n"
    if not text.strip():
        raise ValueError(f"data: {cfg.data} holds no text")
    cut = int(len(text) * 0.9)
    return Splits(Parallel([text[:cut]], []), Parallel([text[cut:]], []))


def chat_splits(cfg: TrainConfig) -> Splits:
    """Conversations (one JSON line each) of ``data``; validation: ``valid``'s, else the last 2% held out."""
    lines = read_conversations(cfg.data)
    if cfg.valid:
        return Splits(Parallel(lines, []), Parallel(read_conversations(cfg.valid), []))
    held = max(1, len(lines) // 50) if len(lines) > 1 else 0
    return Splits(Parallel(lines[: len(lines) - held], []), Parallel(lines[len(lines) - held:] or lines, []))


def tagged_both_ways(splits: Splits, src_lang: str, tgt_lang: str) -> Splits:
    """A both-directions run's data: training pairs each way, tagged; valid and test src->tgt, tagged."""
    test = None if splits.test is None else tagged(splits.test, tgt_lang)
    return Splits(both_directions(splits.train, src_lang, tgt_lang), tagged(splits.valid, tgt_lang), test)


def build_tokenizers(cfg: TrainConfig, splits: Splits) -> TokenizerPair:
    if is_shards(cfg.data):  # the ids in the shards come from this tokenizer
        return load_tokenizers(Path(cfg.data) / "tokenizer")
    if cfg.tokenizer is not None:
        return load_tokenizers(cfg.tokenizer)
    if cfg.task not in PAIRED:  # SentencePiece learns from lines; the text is encoded whole
        lines = [line for text in splits.train.sources for line in text.splitlines()]
        return SentencePiecePair.train(lines, [], cfg.vocab_size, True, cfg.tokenizer_type)
    tags = [target_tag(cfg.src_lang), target_tag(cfg.tgt_lang)] if cfg.both_directions else []
    return SentencePiecePair.train(splits.train.sources, splits.train.targets, cfg.vocab_size, cfg.joint_vocab,
                                   cfg.tokenizer_type, symbols=tags)


def model_config(cfg: TrainConfig, tokenizers: TokenizerPair) -> ModelConfig:
    arch = ARCH_OF_TASK[cfg.task]
    share = "all" if tokenizers.joint else "decoder"
    kind = cfg.kind_fields()
    upsample = kind.get("ctc_upsample", 1)  # a CTC model reads S * upsample
    base = {"arch": arch, "vocab_size": len(tokenizers.src), "share_embeddings": share,
            "tgt_vocab_size": None if tokenizers.joint else len(tokenizers.tgt),
            "max_len": max(cfg.max_len * upsample, cfg.block_size) + 2}
    return ModelConfig.preset(cfg.preset, **{**base, **cfg.model, **kind})


def build_train_task(cfg: TrainConfig, splits: Splits, tokenizers: TokenizerPair, model_cfg: ModelConfig):
    """The training task: over the shards of a preprocessed folder, else over ``splits.train``."""
    if is_shards(cfg.data):
        if cfg.subword_dropout:
            raise ValueError(f"subword_dropout: {cfg.data} holds ids segmented once by `aiayn preprocess`; "
                             "train on the text for BPE-dropout")
        return ShardedTranslationTask(cfg.data, model_cfg, cfg.max_len, cfg.max_tokens, cfg.seed, cfg.rdrop)
    if cfg.subword_dropout and not isinstance(tokenizers.src, SentencePieceTokenizer):
        raise ValueError("subword_dropout: BPE-dropout needs aiayn's own SentencePiece tokenizer")
    task = build_task(cfg, splits.train, tokenizers, model_cfg, subword_dropout=cfg.subword_dropout, rdrop=cfg.rdrop)
    if cfg.glance:  # the validation task scores the plain loss, with or without glancing in training
        task.glance = (cfg.glance, cfg.glance if cfg.glance_end is None else cfg.glance_end)
    return task


def build_task(cfg: TrainConfig, pairs: Parallel, tokenizers: TokenizerPair, model_cfg: ModelConfig,
               shuffle_seed: int | None = None, subword_dropout: float = 0.0, rdrop: float = 0.0):
    """A task over ``pairs``; only the training task passes ``subword_dropout`` and ``rdrop`` (validation
    never samples, and scores one pass)."""
    seed = cfg.seed if shuffle_seed is None else shuffle_seed
    if cfg.task == "chat":
        return ChatTask(pairs.sources, tokenizers, model_cfg, cfg.max_len, cfg.max_tokens, seed)
    if cfg.task in PAIRED:
        kind = CMLMTask if cfg.task == "cmlm" else CTCTask if cfg.task == "ctc" else TranslationTask
        return kind(pairs, tokenizers, model_cfg, cfg.max_len, cfg.max_tokens, seed, subword_dropout, rdrop)
    return BlockTask(pairs.sources, tokenizers, model_cfg, cfg.block_size, cfg.max_tokens, seed,
                     masked=cfg.task == "mlm")
