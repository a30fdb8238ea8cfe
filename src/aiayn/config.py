"""The one architecture config: a frozen dataclass with the paper's presets, saved as JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

ARCHS = ("encoder-decoder", "decoder-only", "encoder-only")
ACTIVATIONS = ("relu", "gelu")
NORMS = ("post", "pre")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
SHARING = ("none", "decoder", "all")

PRESETS: dict[str, dict] = {
    "tiny": dict(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256),
    "small": dict(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024),
    # Table 3 of the paper: base and big.
    "base": dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048),
    "big": dict(d_model=1024, n_heads=16, n_encoder_layers=6, n_decoder_layers=6, d_ff=4096,
                dropout=0.3),
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Transformer (section 3 of the paper); defaults are the base model.

    Args:
        arch: which family member ``build_model`` makes: encoder-decoder | decoder-only | encoder-only.
        vocab_size: source vocabulary (the only one for decoder-only / encoder-only models).
        tgt_vocab_size: target vocabulary; ``None`` means the same as ``vocab_size``.
        d_model, n_heads, d_ff: widths (section 3.2.2, 3.3); ``d_model % n_heads == 0``.
        n_encoder_layers, n_decoder_layers: stack depths N (section 3.1).
        dropout: P_drop on sublayer outputs and on embeddings + positions (section 5.4).
        activation: inside the feed-forward network, relu (paper) or gelu.
        norm: ``post`` = LayerNorm(x + Sublayer(x)) (paper), ``pre`` = x + Sublayer(LayerNorm(x)).
        positions: sinusoidal (section 3.5) | learned | rope (rotary) | none.
        share_embeddings: none | decoder (target embedding = output projection) | all (source too).
        max_len: longest sequence for learned positions (sinusoidal and rope take any length).
        pad_id, bos_id, eos_id, unk_id: special token ids, fixed for every tokenizer.
    """

    arch: str = "encoder-decoder"
    vocab_size: int = 37000
    tgt_vocab_size: int | None = None
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    norm: str = "post"
    positions: str = "sinusoidal"
    share_embeddings: str = "all"
    max_len: int = 1024
    layer_norm_eps: float = 1e-5
    position_base: float = 10000.0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def target_vocab(self) -> int:
        """Size of the vocabulary the output projection predicts."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def d_head(self) -> int:
        """d_k = d_v = d_model / h (section 3.2.2)."""
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        """A named preset (tiny, small, base, big) with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"preset: unknown name {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"config: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        """Write the config as JSON, atomically (temp file, then rename)."""
        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON (line {err.lineno}): {err.msg}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object of config fields")
        return cls.from_dict(data)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_choice(cfg: ModelConfig, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(cfg, name)
    if value not in choices:
        raise ValueError(f"{name}: unknown value {value!r}; choose one of {', '.join(choices)}")


def _validate(cfg: ModelConfig) -> None:
    for name, choices in (("arch", ARCHS), ("activation", ACTIVATIONS), ("norm", NORMS),
                          ("positions", POSITIONS), ("share_embeddings", SHARING)):
        _check_choice(cfg, name, choices)
    for name in ("vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) <= 0:
            raise ValueError(f"{name}: must be a positive integer, got {getattr(cfg, name)!r}")
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 0:
            raise ValueError(f"{name}: must be a non-negative integer, got {getattr(cfg, name)!r}")
    if cfg.tgt_vocab_size is not None and cfg.tgt_vocab_size <= 0:
        raise ValueError(f"tgt_vocab_size: must be a positive integer, got {cfg.tgt_vocab_size!r}")
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"d_model: {cfg.d_model} is not divisible by n_heads={cfg.n_heads}")
    if cfg.positions == "rope" and cfg.d_head % 2:
        raise ValueError(f"n_heads: rope needs an even head size, d_model/n_heads = {cfg.d_head}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout: must be in [0, 1), got {cfg.dropout!r}")
    if cfg.share_embeddings == "all" and cfg.arch == "encoder-decoder" and cfg.target_vocab != cfg.vocab_size:
        raise ValueError("share_embeddings: 'all' needs one joint vocabulary (tgt_vocab_size == vocab_size)")
    specials = {"pad_id": cfg.pad_id, "bos_id": cfg.bos_id, "eos_id": cfg.eos_id, "unk_id": cfg.unk_id}
    for name, value in specials.items():
        if not 0 <= value < min(cfg.vocab_size, cfg.target_vocab):
            raise ValueError(f"{name}: {value} is outside the vocabulary")
    if len(set(specials.values())) != len(specials):
        raise ValueError("pad_id/bos_id/eos_id/unk_id: special ids must be distinct")
    if cfg.arch == "encoder-decoder" and (cfg.n_encoder_layers == 0 or cfg.n_decoder_layers == 0):
        raise ValueError("n_encoder_layers/n_decoder_layers: an encoder-decoder needs both stacks")
