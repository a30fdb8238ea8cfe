"""The training recipe: one dataclass, read from YAML and overridden by command-line flags.

Each field's help text and choices live here, in its metadata; ``aiayn train``'s flags are generated
from these fields (``aiayn.cli.train``), so a new field is a new flag with nothing else to edit.
Errors name the field (``max_steps: ...``); the command line shows it as its flag (``--max-steps``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.data.corpus import target_tag
from aiayn.decoding.config import DecodingConfig
from aiayn.io.run import RunFolder
from aiayn.model.config import PRESETS, ModelConfig
from aiayn.model.fields import typed_fields

TASKS = ("translation", "cmlm", "ctc", "lm", "mlm", "chat")
CTC_UPSAMPLE = 2  # a CTC model's upsampling unless model.ctc_upsample says otherwise
SCHEDULES = ("noam", "inverse_sqrt", "cosine", "constant")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
TOKENIZER_TYPES = ("bpe", "unigram", "char")  # aiayn.tokenizers.MODEL_TYPES (no torch here)


def _f(default, help: str, choices: tuple | None = None):
    """A recipe field with its command-line help (and choices); a dict default is made per instance."""
    meta = {"help": help, "choices": choices}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """Everything ``aiayn train`` needs. Unknown YAML keys are errors naming the key."""

    data: str = _f("numbers", "dataset name (multi30k, tatoeba-cmn, copy, reverse, numbers) or path")
    task: str = _f("translation", "what to train: translation (encoder-decoder), cmlm (Mask-Predict's "
                   "non-autoregressive encoder-decoder), ctc (a non-autoregressive encoder-decoder trained with CTC "
                   f"over the source upsampled model.ctc_upsample times, default {CTC_UPSAMPLE}), lm (decoder-only), "
                   "mlm (encoder-only), chat (fine-tune a "
                   "chat model from init_from on a JSON-lines file of {\"messages\": [...]}, the loss on the "
                   "assistant's turns)", TASKS)
    src_lang: str | None = _f(None, "source language (file suffix for PREFIX.SRC files)")
    tgt_lang: str | None = _f(None, "target language")
    data_dir: str | None = _f(None, "local folder with the dataset's files (no download)")
    valid: str | None = _f(None, "validation file or prefix for your own data (default: 1% held out)")
    output: str = _f("runs/run", "run folder (RUN)")
    preset: str = _f("small", "model size", tuple(PRESETS))
    model: dict = field(default_factory=dict, metadata={"help": "ModelConfig field overrides, e.g. {dropout: 0.3} "
                                                        "(recipe files only)", "choices": None})
    decoding: dict = field(default_factory=dict, metadata={
        "help": "the run's decoding defaults, DecodingConfig fields, e.g. {beam_size: 12, length_penalty: 1.4}: "
                "written into every checkpoint as generation.json, used by translate, evaluate and serve "
                "(recipe files only)", "choices": None})
    init_from: str | None = _f(None, "fine-tune: start from this checkpoint or run folder (aiayn's or imported): its "
                               "architecture, weights and tokenizer; optimizer, schedule and data from the recipe")
    freeze: str | None = _f(None, "parts left untrained, comma-separated: embeddings, encoder, decoder, output_bias, "
                            "layers:A-B")
    lora_r: int = _f(0, "LoRA rank: train only low-rank adapters on the lora_targets layers, the model frozen; the "
                     "run's checkpoints are PEFT adapter folders (0 = off; needs init_from)")
    lora_alpha: float = _f(16.0, "LoRA scale numerator: the update is (lora_alpha / lora_r) B A x")
    lora_dropout: float = _f(0.0, "dropout on the LoRA update's input")
    lora_targets: str = _f("q,k,v,o", "layers LoRA adapts, comma-separated: q, k, v, o (attention projections), ffn")
    tokenizer: str | None = _f(None, "folder with trained tokenizer model(s) to reuse")
    vocab_size: int = _f(8000, "subword vocabulary size (ignored by char)")
    tokenizer_type: str = _f("bpe", "SentencePiece model type", TOKENIZER_TYPES)
    joint_vocab: bool = _f(True, "one shared source/target vocabulary (default) or two")
    subword_dropout: float = _f(0.0, "BPE-dropout rate: translation training text is segmented afresh each "
                                "epoch, each merge skipped with this probability (bpe only; 0 = off)")
    both_directions: bool = _f(False, "translation: one model learns src->tgt and tgt->src at once, each source led "
                               "by its target-language tag <2LANG> (Johnson et al., 2017); validation and "
                               "generation.json keep src->tgt, --source-prefix '<2SRC>' translates back")
    max_len: int = _f(128, "pairs with more tokens on a side are filtered (and counted)")
    block_size: int = _f(128, "lm / mlm block length in tokens (the context)")
    max_tokens: int = _f(4096, "padded tokens per batch")
    accum: int = _f(1, "gradient accumulation steps")
    fsdp: bool = _f(False, "under torchrun: shard parameters, gradients and optimizer state over the processes "
                    "(PyTorch's FSDP2 fully_shard) instead of a whole copy on each (DDP)")
    max_steps: int = _f(1000, "optimizer steps to train")
    time_limit_min: float = _f(0.0, "stop after this many minutes of training (0 = no limit)")
    auto_steps: bool = _f(False, "set max_steps to what time_limit_min holds, timed on the run's first steps "
                                 "(within the warm-up); the run then trains exactly that many steps (logged as "
                                 "max_steps in metrics.jsonl)")
    schedule: str = _f("noam", "learning rate schedule: noam (paper, eq. 3), inverse_sqrt (peak lr, then 1/sqrt "
                       "decay), cosine (peak lr, then a half cosine to lr/10 at max_steps) or constant (peak lr after "
                       "the warm-up)", SCHEDULES)
    lr: float = _f(1e-3, "peak learning rate (inverse_sqrt, cosine, constant)")
    lr_factor: float = _f(1.0, "factor on noam's learning rate")
    warmup: int = _f(4000, "warm-up steps")
    label_smoothing: float = _f(0.1, "label smoothing epsilon (section 5.4)")
    weight_decay: float = _f(0.0, "decoupled weight decay (AdamW) on weight matrices and embeddings, not on biases "
                             "and norms (0 = the paper's plain Adam)")
    rdrop: float = _f(0.0, "R-Drop weight alpha (translation): each batch runs twice, with two dropout masks, and "
                      "alpha/2 times the symmetric KL between the two predictions is added (0 = off; twice the "
                      "compute per batch)")
    glance: float = _f(0.0, "glancing training (GLAT, Qian et al. 2021) for task cmlm or ctc: a first pass without "
                       "gradient, "
                       "then this share of its wrong predictions revealed as decoder inputs and the loss on the rest "
                       "(the paper starts at 0.5; 0 = off: Mask-Predict's random masks)")
    glance_end: float | None = _f(None, "glancing: the share at the last step, reached linearly (default: glance)")
    clip_norm: float = _f(1.0, "gradient norm clipping (0 = none)")
    eval_every: int = _f(500, "steps between validations and checkpoints")
    keep_last: int = _f(5, "step checkpoints kept for `aiayn average`")
    patience: int = _f(0, "validations without improvement before stopping (0 = never)")
    bleu_sentences: int = _f(1000, "validation sentences translated for BLEU/chrF")
    beam_size: int | None = _f(None, "beam size of the run's decoding, as decoding.beam_size (which wins when both "
                                     "are given): the validation translations and every checkpoint's "
                                     "generation.json decode alike (unset: DecodingConfig's, 4)")
    synthetic_size: int = _f(20000, "training pairs for copy / reverse / numbers")
    seed: int = _f(0, "random seed")
    device: str = _f("auto", "auto, cpu, cuda or mps")
    precision: str = _f("auto", "auto | fp32 | bf16 | fp16 (CPU: auto = fp32, bf16 = mixed precision)", PRECISIONS)
    log_every: int = _f(50, "steps between log lines")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name}: unknown value {getattr(self, f.name)!r}; choose one of "
                                 f"{', '.join(choices)}")
        for name in ("max_steps", "max_tokens", "accum", "eval_every", "vocab_size", "max_len", "block_size",
                     "beam_size"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)!r}")
        for name in ("weight_decay", "rdrop"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        self._check_pretrained()
        if self.auto_steps and not self.time_limit_min:
            raise ValueError("auto_steps: needs time_limit_min, the minutes the steps must fill")
        if self.rdrop and self.task != "translation":
            raise ValueError("rdrop: R-Drop needs task translation")
        self._check_glance()
        if not 0.0 <= self.subword_dropout < 1.0:
            raise ValueError(f"subword_dropout: must be in [0, 1), got {self.subword_dropout!r}")
        if self.subword_dropout and (self.task != "translation" or self.tokenizer_type != "bpe"):
            raise ValueError("subword_dropout: BPE-dropout needs task translation and tokenizer_type bpe")
        self._check_both_directions()
        if not isinstance(self.model, dict):
            raise ValueError("model: must be a mapping of model config fields")
        if "kind" in self.model:
            raise ValueError("model.kind: the task chooses it (task cmlm or ctc for a non-autoregressive model)")
        upsample = self.model.get("ctc_upsample")
        if (self.task != "ctc" and upsample is not None) or (self.task == "ctc" and upsample in (0, 1)):
            raise ValueError(f"model.ctc_upsample: 2 or more for task ctc, and only there; got {upsample!r}")
        try:  # a typo or a wrong type under model: is found now, before any data or tokenizer work
            ModelConfig.preset(self.preset, **{**self.model, **self.kind_fields()})
        except ValueError as err:
            raise ValueError(f"model.{err}") from None
        if not isinstance(self.decoding, dict):
            raise ValueError("decoding: must be a mapping of decoding options")
        try:
            DecodingConfig().replace(**self.decoding)
        except ValueError as err:
            raise ValueError(f"decoding.{err}") from None

    def _check_glance(self) -> None:
        """Glancing: shares in [0, 1], for the CMLM and CTC tasks only."""
        for name in ("glance", "glance_end"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: a share of the wrong predictions, in [0, 1]; got {value!r}")
        if (self.glance or self.glance_end) and self.task not in ("cmlm", "ctc"):
            raise ValueError("glance: glancing training is for task cmlm or ctc")

    def _check_pretrained(self) -> None:
        """LoRA and the chat task adapt a pretrained model (init_from)."""
        if self.lora_r < 0 or (self.lora_r and not self.init_from):
            raise ValueError(f"lora_r: LoRA adapts a pretrained model: give init_from, and a rank >= 1 "
                             f"(got {self.lora_r!r})")
        if self.fsdp and self.lora_r:  # FSDP2 gave LoRA's B gradients unlike DDP's (2 gloo ranks, torch 2.13)
            raise ValueError("fsdp: not with lora_r: a LoRA run's training state is a few MB, train it with DDP "
                             "(torchrun without --fsdp)")
        if self.task == "chat" and not self.init_from:
            raise ValueError("task: chat fine-tunes a chat model: give init_from (a checkpoint with a chat template)")

    def kind_fields(self) -> dict:
        """The model config's ``kind`` this task trains (and a CTC model's ``ctc_upsample``)."""
        if self.task == "ctc":
            return {"kind": "ctc", "ctc_upsample": self.model.get("ctc_upsample", CTC_UPSAMPLE)}
        return {"kind": "cmlm" if self.task == "cmlm" else "autoregressive"}

    def _check_both_directions(self) -> None:
        """both_directions needs a translation run on text with both languages named and its own joint vocabulary
        (the tags are made single tokens of it)."""
        if not self.both_directions:
            return
        if self.task != "translation" or not (self.src_lang and self.tgt_lang) or self.src_lang == self.tgt_lang:
            raise ValueError("both_directions: needs task translation and two different languages, src_lang and "
                             "tgt_lang")
        if not self.joint_vocab or self.tokenizer or self.init_from:
            raise ValueError("both_directions: needs the run's own joint vocabulary (joint_vocab true, no tokenizer "
                             "or init_from): the target-language tags are tokens of it")

    def generation(self) -> dict | None:
        """What ``generation.json`` records of this recipe's decoding (None: the recipe chose none); with
        ``both_directions`` the source prefix asks for tgt_lang unless the recipe names one."""
        return self.decoding_config().changes() or None

    def decoding_config(self) -> DecodingConfig:
        """The run's one decoding: validation translates with it and every checkpoint ships it (``decoding``, with
        ``beam_size`` and, for ``both_directions``, the target tag as defaults)."""
        tag = {"source_prefix": target_tag(self.tgt_lang)} if self.both_directions else {}
        beam = {} if self.beam_size is None else {"beam_size": self.beam_size}
        return DecodingConfig().replace(**{**tag, **beam, **self.decoding})

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides) -> TrainConfig:
        """Read a YAML recipe, then apply ``overrides`` (values that are None are ignored)."""
        return cls.from_dict({**read_recipe(path), **{k: v for k, v in overrides.items() if v is not None}},
                             source=str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> TrainConfig:
        """Fields by name, checked against their types; errors are prefixed with ``source``."""
        try:
            return cls(**typed_fields(cls, data))
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


RECIPES = Path(__file__).resolve().parents[1] / "configs"  # the recipes installed with the package


def recipe_path(name: str | Path) -> Path:
    """A recipe file: the path given, else the packaged recipe of that name (``multi30k-de-en`` or
    ``multi30k-de-en.yaml``: the recipes an installed aiayn carries, with no checkout); a ValueError naming both
    when neither exists."""
    path = Path(name)
    if path.is_file():
        return path
    packaged = RECIPES / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if path.parent == Path(".") and packaged.is_file():
        return packaged
    names = ", ".join(sorted(p.stem for p in RECIPES.glob("*.yaml")))
    raise ValueError(f"{name}: config file not found (a path, or one of the recipes aiayn carries: {names})")


def read_recipe(path: str | Path) -> dict:
    """The mapping of a YAML recipe file or packaged recipe name (:func:`recipe_path`); a missing or malformed file
    is a one-line error naming it."""
    import yaml

    path = recipe_path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of recipe fields")
    return data


# Fields a resumed run may change: limits and bookkeeping, not what the model or its data are.
RESUMABLE_CHANGES = ("max_steps", "time_limit_min", "eval_every", "log_every", "patience", "keep_last",
                     "bleu_sentences", "beam_size", "device", "output", "data_dir", "decoding", "fsdp")


def resume_config(run: RunFolder, requested: dict, source: str) -> tuple[TrainConfig, list[str]]:
    """The recipe to continue ``run`` with: its saved recipe and the ``requested`` changes it may take
    (:func:`resume_recipe`); ``aiayn train --resume`` and ``aiayn experiment`` both resume through it."""
    return resume_recipe(run.saved_recipe(), {**requested, "output": str(run.path)}, source)


def resume_recipe(saved: dict, requested: dict, source: str) -> tuple[TrainConfig, list[str]]:
    """The recipe of a resumed run: the ``saved`` one, with the ``requested`` fields that may change.

    Returns the recipe and one line per change; a requested value that contradicts the run in any other
    field (preset, vocabulary, task, data, model...) is a ValueError naming every such field.
    """
    old = TrainConfig.from_dict(saved, source).to_dict()
    new = TrainConfig.from_dict({**saved, **requested}, source).to_dict()
    differ = [name for name in requested if new[name] != old[name]]
    refused = [name for name in differ if name not in RESUMABLE_CHANGES]
    if refused:
        listed = "; ".join(f"{name}: run has {old[name]!r}, asked {new[name]!r}" for name in refused)
        raise ValueError(f"resume: the run was trained differently ({listed}); drop these settings to "
                         f"resume, or start a new run in another folder")
    return TrainConfig(**new), [f"{name}: {old[name]!r} -> {new[name]!r}" for name in differ]
