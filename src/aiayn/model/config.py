"""The one architecture config: a frozen dataclass with the paper's presets, saved as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from aiayn.io.files import atomic_write_text
from aiayn.model.fields import typed_fields

# The special token ids, the same for every tokenizer and model (the one place they are defined).
SPECIAL_IDS = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
MASK_ID = 4  # "<mask>", for masked-token (BERT-style) training
FIRST_ORDINARY_ID = 5

ARCHS = ("encoder-decoder", "decoder-only", "encoder-only")
KINDS = ("autoregressive", "cmlm", "ctc")  # how an encoder-decoder's decoder fills the target
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
SINUSOID_LAYOUTS = ("interleaved", "halves")
NORMS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
FEED_FORWARDS = ("standard", "swiglu")
ROPE_LAYOUTS = ("interleaved", "halves")
# rope_scaling: the keys each rule needs (the rule's name is under "type").
ROPE_SCALING = {"linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
POSITIONS = ("sinusoidal", "learned", "rope", "relative", "none")
SHARING = ("none", "decoder", "inputs", "all")

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
        attention_dropout, activation_dropout: dropout on the attention weights and inside the
            feed-forward network (after its activation); ``None`` = ``dropout`` (as before these existed).
        activation: inside the feed-forward network, relu (paper), gelu, gelu_tanh (GPT-2's tanh
            approximation) or silu (Marian's "swish").
        norm: ``post`` = LayerNorm(x + Sublayer(x)) (paper), ``pre`` = x + Sublayer(LayerNorm(x)).
        norm_type: ``layernorm`` (the paper) or ``rmsnorm`` (LLaMA: x / RMS(x) * g, no mean, no bias, computed
            in float32); ``layer_norm_eps`` is its epsilon either way.
        feed_forward: ``standard`` (equation 2) or ``swiglu``: W_down(act(W_gate x) * W_up x), the gated unit
            of LLaMA (with ``activation`` silu; gelu makes it GeGLU).
        n_kv_heads: key/value heads, shared by n_heads / n_kv_heads query heads each (grouped-query
            attention; 1 = multi-query); ``None`` = n_heads (the paper). The KV cache holds only these.
        head_dim: d_k of every head; ``None`` = d_model / n_heads (some checkpoints give it explicitly).
        position_base: the base of sinusoidal and rotary frequencies (rope_theta).
        rope_layout: which dimensions rotary positions rotate together: ``interleaved`` pairs (2i, 2i+1)
            (RoFormer) or ``halves``: i with i + d/2 (LLaMA in Hugging Face's layout).
        rope_scaling: ``None`` or {"type": "linear", "factor": f} (positions divided by f) or {"type": "llama3",
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
        qkv_bias, out_bias, ffn_bias: biases on the query/key/value projections, the attention output
            projection, and the feed-forward layers (the paper: all; LLaMA: none; Qwen2: q/k/v only).
        scale_attention: divide the attention scores by sqrt(d_k) (equation 1, the paper); False is the
            ablation of section 3.2.1 (plain dot products: the softmax saturates as d_k grows).
        sliding_window: each token attends to at most this many latest tokens, itself included (Mistral);
            ``None`` = all earlier tokens (causal self-attention of decoders only).
        padding_row: the last id is a padding row aiayn appended to an imported vocabulary (GPT-2, Llama have
            no padding token): never predicted, it takes no part in the training softmax nor in a sampling draw.
        positions: sinusoidal (section 3.5) | learned | rope (rotary) | relative (T5's learned bias per bucketed
            offset and head, ``model/positions.py``) | none.
        relative_buckets, relative_max_distance: T5's ``relative_attention_num_buckets`` and ``..._max_distance``.
        scale_embeddings: multiply token embeddings by sqrt(d_model) (section 3.4; GPT-2, BERT and some
            Marian models do not).
        sinusoid_layout: ``interleaved`` = sin at even, cos at odd dimensions (the paper's equation);
            ``halves`` = sin in the first half, cos in the second (Marian / OPUS-MT); same frequencies.
        share_embeddings: none | decoder (target embedding = output projection) | inputs (one table for source and
            target, the output its own: T5 v1.1) | all (all three, section 3.4).
        rescale_output: the decoder's output times d_model ** -0.5 before the projection (T5 v1.0).
        max_len: longest sequence for learned positions (sinusoidal and rope take any length).
        embedding_norm: a LayerNorm on embeddings + positions (BERT; the paper has none).
        output_transform: before the output projection, LayerNorm(activation(x W + b)) (BERT's masked-LM
            head; the paper has none).
        output_bias: a bias on the pre-softmax projection (the paper has none; Marian's
            ``final_logits_bias``).
        mask_id: the id that stands for a masked token (masked-LM training, fill-mask, CMLM).
        kind: how the decoder fills the target: ``autoregressive`` (one token after another, the paper's), or for an
            encoder-decoder every position at once (``aiayn.model.nonautoregressive``): ``cmlm``, Mask-Predict's
            conditional masked language model (its decoder attends over the whole target, a length predictor reads
            the encoder output; ``strategy="mask-predict"``), or ``ctc`` (its decoder reads the source ids, each
            repeated ``ctc_upsample`` times, with no causal mask, and emits a token or the blank (``mask_id``) at
            each position; ``strategy="ctc"``). Checkpoints written before this field (``cmlm: true``,
            ``ctc_upsample`` above 0) load as the kind they were.
        ctc_upsample: a CTC model's upsampling, 2 or more; null for the other kinds.
        pad_id, bos_id, eos_id, unk_id: special token ids (fixed for aiayn's own tokenizers). ``bos_id`` is
            what decoding starts from; it may equal ``pad_id`` (Marian starts from the pad token), and so
            may ``unk_id`` for a model without an unknown token (GPT-2).
        stop_ids: more ids that end a generated sequence as ``eos_id`` does (Llama 3's and Qwen2's several
            end-of-sequence and end-of-turn tokens); empty for the paper's models.
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
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    activation: str = "relu"
    norm: str = "post"
    positions: str = "sinusoidal"
    share_embeddings: str = "all"
    rescale_output: bool = False
    relative_buckets: int = 32
    relative_max_distance: int = 128
    max_len: int = 1024
    layer_norm_eps: float = 1e-5
    norm_type: str = "layernorm"
    feed_forward: str = "standard"
    n_kv_heads: int | None = None
    head_dim: int | None = None
    position_base: float = 10000.0
    rope_layout: str = "interleaved"
    rope_scaling: dict | None = None
    qkv_bias: bool = True
    out_bias: bool = True
    ffn_bias: bool = True
    scale_attention: bool = True
    sliding_window: int | None = None
    padding_row: bool = False
    scale_embeddings: bool = True
    sinusoid_layout: str = "interleaved"
    embedding_norm: bool = False
    output_transform: bool = False
    output_bias: bool = False
    pad_id: int = SPECIAL_IDS["pad_id"]
    bos_id: int = SPECIAL_IDS["bos_id"]
    eos_id: int = SPECIAL_IDS["eos_id"]
    unk_id: int = SPECIAL_IDS["unk_id"]
    mask_id: int = MASK_ID
    kind: str = "autoregressive"
    ctc_upsample: int | None = None
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))  # a JSON list, read back
        _validate(self)

    @property
    def target_vocab(self) -> int:
        """Size of the vocabulary the output projection predicts."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def d_head(self) -> int:
        """d_k = d_v = d_model / h (section 3.2.2), unless ``head_dim`` says otherwise."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_kv_heads``, or h (every query head its own, as in the paper)."""
        return self.n_kv_heads or self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        """A named preset (tiny, small, base, big) with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"preset: unknown name {name!r}; choose one of {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def non_autoregressive(self) -> bool:
        """A CMLM or a CTC model: every target position at once (``decoding.config.own_strategy`` names how)."""
        return self.kind != "autoregressive"

    @property
    def blank_id(self) -> int:
        """A CTC model's blank: the ``<mask>`` id (never a token of the text)."""
        return self.mask_id

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Every id that ends a generated sequence: EOS, then ``stop_ids``."""
        return (self.eos_id, *self.stop_ids)

    @property
    def special_ids(self) -> tuple[int, int, int, int]:
        """(pad, bos, eos, unk)."""
        return self.pad_id, self.bos_id, self.eos_id, self.unk_id

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        """Fields by name; unknown names and values of the wrong type are errors naming the field. A config
        written before ``kind`` (``cmlm``, ``ctc_upsample: 0``) is read as the kind it names."""
        return cls(**typed_fields(cls, _kind_of_old(data)))

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
        try:
            return cls.from_dict(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


def _kind_of_old(data: dict) -> dict:
    """``data`` with the two flags of configs written before ``kind`` read as one kind: ``cmlm: true`` is kind
    cmlm, ``ctc_upsample`` above 0 kind ctc (0: autoregressive)."""
    if "kind" in data or not {"cmlm", "ctc_upsample"} & data.keys():
        return data
    old = dict(data)
    cmlm, upsample = old.pop("cmlm", False), old.pop("ctc_upsample", 0)
    if cmlm:
        old["kind"] = "cmlm"
    if upsample:
        old.update(kind="ctc", ctc_upsample=upsample)
    return old


def _check_choice(cfg: ModelConfig, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(cfg, name)
    if value not in choices:
        raise ValueError(f"{name}: unknown value {value!r}; choose one of {', '.join(choices)}")


def _check_rope_scaling(scaling: dict | None) -> None:
    if scaling is None:
        return
    kind = scaling.get("type")
    if kind not in ROPE_SCALING:
        raise ValueError(f"rope_scaling: type {kind!r} is not supported; aiayn has {', '.join(ROPE_SCALING)}")
    needed = set(ROPE_SCALING[kind])
    if set(scaling) - {"type"} != needed:
        raise ValueError(f"rope_scaling: {kind} takes exactly {', '.join(sorted(needed))}; got "
                         f"{', '.join(sorted(set(scaling) - {'type'})) or 'none'}")
    bad = [k for k in needed if isinstance(scaling[k], bool) or not isinstance(scaling[k], (int, float))
           or scaling[k] <= 0]
    if bad:
        raise ValueError(f"rope_scaling: {', '.join(sorted(bad))} must be positive numbers")


def _check_sizes(cfg: ModelConfig) -> None:
    """Sizes and counts: positive integers (layer counts may be 0; the optional ones null)."""
    for name in ("vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) <= 0:
            raise ValueError(f"{name}: must be a positive integer, got {getattr(cfg, name)!r}")
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 0:
            raise ValueError(f"{name}: must be a non-negative integer, got {getattr(cfg, name)!r}")
    if cfg.tgt_vocab_size is not None and cfg.tgt_vocab_size <= 0:
        raise ValueError(f"tgt_vocab_size: must be a positive integer, got {cfg.tgt_vocab_size!r}")
    for name in ("n_kv_heads", "head_dim", "sliding_window"):
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise ValueError(f"{name}: must be a positive integer or null, got {value!r}")


def _check_special_ids(cfg: ModelConfig) -> None:
    """Special ids inside the vocabulary, and distinct where they must be."""
    specials = {"pad_id": cfg.pad_id, "bos_id": cfg.bos_id, "eos_id": cfg.eos_id, "unk_id": cfg.unk_id,
                "mask_id": cfg.mask_id}
    for name, value in specials.items():
        if not 0 <= value < min(cfg.vocab_size, cfg.target_vocab):
            raise ValueError(f"{name}: {value} is outside the vocabulary")
    for value in cfg.stop_ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < cfg.target_vocab:
            raise ValueError(f"stop_ids: {value!r} is not an id of the vocabulary")
    if cfg.pad_id in cfg.stop_ids:
        raise ValueError("stop_ids: the padding id cannot end a sequence")
    if cfg.eos_id in (cfg.pad_id, cfg.bos_id, cfg.unk_id) or cfg.pad_id != cfg.bos_id == cfg.unk_id:
        raise ValueError("pad_id/bos_id/eos_id/unk_id: special ids must be distinct (bos_id and unk_id may "
                         "equal pad_id)")


def _check_non_autoregressive(cfg: ModelConfig) -> None:
    """A CMLM or a CTC model: an encoder-decoder with absolute positions; a CTC model's upsampling alone."""
    if (cfg.kind == "ctc") != (cfg.ctc_upsample is not None) or (cfg.ctc_upsample or 2) < 2:
        raise ValueError(f"ctc_upsample: 2 or more for kind ctc, null for the others; got {cfg.ctc_upsample!r} for "
                         f"kind {cfg.kind}")
    if not cfg.non_autoregressive:
        return
    if cfg.arch != "encoder-decoder":
        raise ValueError(f"kind: a {cfg.kind} model is an encoder-decoder, not {cfg.arch}")
    if cfg.positions not in ("sinusoidal", "learned"):
        raise ValueError(f"positions: a {cfg.kind} model needs absolute positions (sinusoidal or learned), not "
                         f"{cfg.positions}: with them alone equal decoder inputs (all <mask>, a repeated source id) "
                         "give equal predictions")


def _validate(cfg: ModelConfig) -> None:
    for name, choices in (("arch", ARCHS), ("activation", ACTIVATIONS), ("norm", NORMS),
                          ("positions", POSITIONS), ("share_embeddings", SHARING),
                          ("sinusoid_layout", SINUSOID_LAYOUTS), ("norm_type", NORM_TYPES),
                          ("feed_forward", FEED_FORWARDS), ("rope_layout", ROPE_LAYOUTS), ("kind", KINDS)):
        _check_choice(cfg, name, choices)
    _check_sizes(cfg)
    if cfg.head_dim is None and cfg.d_model % cfg.n_heads:
        raise ValueError(f"d_model: {cfg.d_model} is not divisible by n_heads={cfg.n_heads}")
    if cfg.n_heads % cfg.kv_heads:
        raise ValueError(f"n_kv_heads: {cfg.kv_heads} does not divide n_heads={cfg.n_heads}")
    _check_rope_scaling(cfg.rope_scaling)
    _check_non_autoregressive(cfg)
    if cfg.padding_row and cfg.pad_id != cfg.target_vocab - 1:
        raise ValueError(f"padding_row: the padding row is the last id ({cfg.target_vocab - 1}), not pad_id "
                         f"{cfg.pad_id}")
    if cfg.positions == "relative" and (cfg.relative_buckets < 4 or cfg.relative_buckets % 2
                                        or cfg.relative_max_distance <= cfg.relative_buckets // 2):
        raise ValueError(f"relative_buckets: T5's buckets need an even count of at least 4 and relative_max_distance "
                         f"above half of it; got {cfg.relative_buckets} and {cfg.relative_max_distance}")
    if cfg.positions == "rope" and cfg.d_head % 2:
        raise ValueError(f"n_heads: rope needs an even head size, d_model/n_heads = {cfg.d_head}")
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        value = getattr(cfg, name)
        if value is not None and not 0.0 <= value < 1.0:
            raise ValueError(f"{name}: must be in [0, 1), got {value!r}")
    if (cfg.share_embeddings in ("all", "inputs") and cfg.arch == "encoder-decoder"
            and cfg.target_vocab != cfg.vocab_size):
        raise ValueError(f"share_embeddings: {cfg.share_embeddings!r} needs one joint vocabulary "
                         "(tgt_vocab_size == vocab_size)")
    _check_special_ids(cfg)
    if cfg.arch == "encoder-decoder" and (cfg.n_encoder_layers == 0 or cfg.n_decoder_layers == 0):
        raise ValueError("n_encoder_layers/n_decoder_layers: an encoder-decoder needs both stacks")
