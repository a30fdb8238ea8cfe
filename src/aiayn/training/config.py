"""The training recipe: one dataclass, read from YAML and overridden by command-line flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

TASKS = ("translation", "lm", "mlm")


@dataclass
class TrainConfig:
    """Everything ``aiayn train`` needs. Unknown YAML keys are errors naming the key."""

    data: str = "numbers"  # built-in name or path (see aiayn.data.datasets)
    task: str = "translation"  # translation | lm | mlm
    src_lang: str | None = None
    tgt_lang: str | None = None
    data_dir: str | None = None
    valid: str | None = None  # a validation file/prefix for user data (else 1% held out)
    output: str = "runs/run"
    preset: str = "small"
    model: dict = field(default_factory=dict)  # ModelConfig field overrides, e.g. {dropout: 0.3}
    tokenizer: str | None = None  # a folder with tokenizer model(s) to reuse instead of training one
    vocab_size: int = 8000
    tokenizer_type: str = "bpe"  # bpe | unigram
    joint_vocab: bool = True
    max_len: int = 128  # pairs with more tokens on a side are filtered (and counted)
    block_size: int = 128  # lm / mlm block length
    max_tokens: int = 4096  # padded tokens per batch and side
    accum: int = 1  # gradient accumulation steps
    max_steps: int = 1000
    time_limit_min: float = 0.0  # stop after this many minutes of training (0 = no limit)
    schedule: str = "noam"  # noam (paper, eq. 3) | inverse_sqrt (peak lr, then 1/sqrt decay)
    lr: float = 1e-3  # peak lr for inverse_sqrt; noam's factor multiplies its own formula
    lr_factor: float = 1.0
    warmup: int = 4000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 = no clipping
    eval_every: int = 500
    keep_last: int = 5  # step checkpoints kept for `aiayn average`
    patience: int = 0  # evaluations without improvement before stopping (0 = never)
    bleu_sentences: int = 1000  # validation sentences decoded for BLEU/chrF
    beam_size: int = 1  # decoding for validation BLEU
    synthetic_size: int = 20000  # training pairs for copy / reverse / numbers
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | mps
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (CPU: auto = fp32, bf16 = autocast)
    log_every: int = 50

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task: unknown value {self.task!r}; choose one of {', '.join(TASKS)}")
        if self.schedule not in ("noam", "inverse_sqrt"):
            raise ValueError(f"schedule: unknown value {self.schedule!r}; choose noam or inverse_sqrt")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"precision: unknown value {self.precision!r}; choose auto, fp32, bf16 or fp16")
        for name in ("max_steps", "max_tokens", "accum", "eval_every", "vocab_size", "max_len", "block_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.model, dict):
            raise ValueError("model: must be a mapping of model config fields")

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides) -> TrainConfig:
        """Read a YAML recipe, then apply ``overrides`` (values that are None are ignored)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: config file not found")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of recipe fields")
        return cls.from_dict({**data, **{k: v for k, v in overrides.items() if v is not None}}, source=str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown field(s) {', '.join(unknown)}")
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        return cls(**{k: _typed(source, k, v, types[k]) for k, v in data.items()})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _typed(source: str, name: str, value, annotation: str):
    """Check one recipe value against its field's type; numbers written as text (YAML reads 2e-3 so) convert."""
    if value is None and "None" in annotation:
        return None
    kind = annotation.split(" |")[0]
    if kind == "float" and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    expected = {"int": int, "str": str, "bool": bool, "dict": dict}.get(kind)
    if expected is not None and isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    raise ValueError(f"{source}: field {name} must be {'a number' if kind == 'float' else f'of type {kind}'}, "
                     f"got {value!r}")
