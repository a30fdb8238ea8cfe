"""What a ``ModelConfig`` may hold: the choices of each option, and the checks run on every config made (each
error names the field), including how configs written before ``kind`` are read."""

from __future__ import annotations

ARCHS = ("encoder-decoder", "decoder-only", "encoder-only")
KINDS = ("autoregressive", "cmlm", "ctc")  # how an encoder-decoder's decoder fills the target
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
SINUSOID_LAYOUTS = ("interleaved", "halves")
NORMS = ("post", "pre", "sandwich")
LAYER_TYPES = ("full", "sliding")  # a decoder layer attends to every earlier token, or within the window
NORM_TYPES = ("layernorm", "rmsnorm")
FEED_FORWARDS = ("standard", "swiglu")
ROPE_LAYOUTS = ("interleaved", "halves")
# rope_scaling: the keys each rule needs (the rule's name is under "type").
ROPE_SCALING = {"linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                "factors": ("factors",)}  # one divisor per frequency (a GGUF file's rope_freqs: Llama 3.1)
POSITIONS = ("sinusoidal", "learned", "rope", "relative", "none")
SHARING = ("none", "decoder", "inputs", "all")


def kind_of_old(data: dict) -> dict:
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


def _check_choice(cfg, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(cfg, name)
    if value not in choices:
        raise ValueError(f"{name}: unknown value {value!r}; choose one of {', '.join(choices)}")


def _check_rope_scaling(scaling: dict | None, d_head: int) -> None:
    if scaling is None:
        return
    factors = scaling.get("factors") if scaling.get("type") == "factors" else None
    if factors is not None:  # a list: one positive divisor per rotary frequency
        listed = isinstance(factors, (list, tuple)) and len(factors) == d_head // 2
        if set(scaling) != {"type", "factors"} or not listed or any(
                isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0 for f in factors):
            raise ValueError(f"rope_scaling: factors takes a list of {d_head // 2} positive numbers (one per "
                             "frequency of a head)")
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


def _check_sizes(cfg) -> None:
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


def _check_special_ids(cfg) -> None:
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


def _check_non_autoregressive(cfg) -> None:
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


def _check_layer_types(cfg) -> None:
    """Per decoder layer full or sliding attention: one entry a layer, a window for the sliding ones."""
    if not cfg.layer_types:
        if cfg.local_position_base is not None:
            raise ValueError("local_position_base: the rotary base of sliding layers needs layer_types")
        return
    if len(cfg.layer_types) != cfg.n_decoder_layers or any(t not in LAYER_TYPES for t in cfg.layer_types):
        raise ValueError(f"layer_types: one of {', '.join(LAYER_TYPES)} for each of the {cfg.n_decoder_layers} "
                         f"decoder layers; got {list(cfg.layer_types)}")
    if "sliding" in cfg.layer_types and cfg.sliding_window is None:
        raise ValueError("layer_types: sliding layers need sliding_window")
    if cfg.local_position_base is not None and cfg.positions != "rope":
        raise ValueError("local_position_base: a rotary base, for positions rope")


def validate(cfg) -> None:
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
    _check_rope_scaling(cfg.rope_scaling, cfg.d_head)
    _check_non_autoregressive(cfg)
    _check_layer_types(cfg)
    if cfg.padding_row and cfg.pad_id != cfg.target_vocab - 1:
        raise ValueError(f"padding_row: the padding row is the last id ({cfg.target_vocab - 1}), not pad_id "
                         f"{cfg.pad_id}")
    if cfg.positions == "relative" and (cfg.relative_buckets < 4 or cfg.relative_buckets % 2
                                        or cfg.relative_max_distance <= cfg.relative_buckets // 2):
        raise ValueError(f"relative_buckets: T5's buckets need an even count of at least 4 and relative_max_distance "
                         f"above half of it; got {cfg.relative_buckets} and {cfg.relative_max_distance}")
    if cfg.n_experts and (cfg.feed_forward != "swiglu" or not 1 <= cfg.experts_per_token <= cfg.n_experts):
        raise ValueError(f"n_experts: a mixture of SwiGLU experts (feed_forward swiglu), 1 to {cfg.n_experts} per "
                         f"token; got {cfg.feed_forward}, experts_per_token {cfg.experts_per_token}")
    if cfg.rotary_dim is not None and (cfg.positions != "rope" or cfg.rotary_dim % 2 or
                                       not 0 < cfg.rotary_dim <= cfg.d_head):
        raise ValueError(f"rotary_dim: an even number of a head's {cfg.d_head} dimensions, for positions rope; got "
                         f"{cfg.rotary_dim}")
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
