"""The one architecture config: a frozen dataclass with the paper's presets, saved as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from aiayn.io.files import atomic_write_text
from aiayn.model.checks import kind_of_old, validate
from aiayn.model.fields import typed_fields

# The special token ids, the same for every tokenizer and model (the one place they are defined).
SPECIAL_IDS = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
MASK_ID = 4  # "<mask>", for masked-token (BERT-style) training
FIRST_ORDINARY_ID = 5

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

    The options by idea (the Args below in this order): the member and its sizes: arch, vocab_size, tgt_vocab_size,
    d_model, n_heads, d_ff, n_encoder_layers, n_decoder_layers, max_len, kind, ctc_upsample; attention: n_kv_heads,
    head_dim, scale_attention, query_scale, attention_softcap, logit_softcap, qk_norm, qkv_bias, out_bias, ffn_bias;
    feed-forward and experts: feed_forward, activation, n_experts; norms: norm, norm_type, embedding_norm;
    positions: positions, position_base, rope_layout, rope_scaling, rotary_dim, relative_buckets,
    relative_max_distance, sinusoid_layout; layer pattern: sliding_window, layer_types; embeddings and output:
    scale_embeddings, share_embeddings, rescale_output, output_transform, output_bias, padding_row; regularisation:
    dropout, attention_dropout, activation_dropout; token ids: mask_id, pad_id, bos_id, eos_id, unk_id, stop_ids.

    Args:
        arch: which family member ``build_model`` makes: encoder-decoder | decoder-only | encoder-only.
        vocab_size: source vocabulary (the only one for decoder-only / encoder-only models).
        tgt_vocab_size: target vocabulary; ``None`` means the same as ``vocab_size``.
        d_model, n_heads, d_ff: widths (section 3.2.2, 3.3); ``d_model % n_heads == 0``.
        n_encoder_layers, n_decoder_layers: stack depths N (section 3.1).
        max_len: longest sequence for learned positions (sinusoidal and rope take any length).
        kind: how the decoder fills the target: ``autoregressive`` (one token after another, the paper's), or for an
            encoder-decoder every position at once (``aiayn.model.nonautoregressive``): ``cmlm``, Mask-Predict's
            conditional masked language model (its decoder attends over the whole target, a length predictor reads
            the encoder output; ``strategy="mask-predict"``), or ``ctc`` (its decoder reads the source ids, each
            repeated ``ctc_upsample`` times, with no causal mask, and emits a token or the blank (``mask_id``) at
            each position; ``strategy="ctc"``). Checkpoints written before this field (``cmlm: true``,
            ``ctc_upsample`` above 0) load as the kind they were.
        ctc_upsample: a CTC model's upsampling, 2 or more; null for the other kinds.
        n_kv_heads: key/value heads, shared by n_heads / n_kv_heads query heads each (grouped-query
            attention; 1 = multi-query); ``None`` = n_heads (the paper). The KV cache holds only these.
        head_dim: d_k of every head; ``None`` = d_model / n_heads (some checkpoints give it explicitly).
        scale_attention: divide the attention scores by sqrt(d_k) (equation 1, the paper); False is the
            ablation of section 3.2.1 (plain dot products: the softmax saturates as d_k grows).
        query_scale: the attention scores divided by sqrt(query_scale) instead of sqrt(d_k) (Gemma's
            ``query_pre_attn_scalar``); None = d_k (equation 1).
        attention_softcap, logit_softcap: the attention scores and the output logits squashed as cap * tanh(x / cap)
            (Gemma 2); None = none.
        qk_norm: a norm (``norm_type``, over ``d_head``) on each head's queries and keys before the rotary
            embedding (Qwen3, Gemma 3, OLMo 2: the scores stay in range as training runs); the paper has none.
        qkv_bias, out_bias, ffn_bias: biases on the query/key/value projections, the attention output
            projection, and the feed-forward layers (the paper: all; LLaMA: none; Qwen2: q/k/v only).
        feed_forward: ``standard`` (equation 2) or ``swiglu``: W_down(act(W_gate x) * W_up x), the gated unit
            of LLaMA (with ``activation`` silu; gelu makes it GeGLU).
        activation: inside the feed-forward network, relu (paper), gelu, gelu_tanh (GPT-2's tanh
            approximation) or silu (Marian's "swish").
        n_experts: 0 (a feed-forward network, the paper's) or a mixture of this many SwiGLU experts in its place
            (``model/experts.py``: Mixtral, Qwen3-MoE), each token routed to its ``experts_per_token`` best;
            ``expert_d_ff``: each expert's hidden size (None = ``d_ff``); ``renorm_experts``: the chosen experts'
            probabilities divided by their sum.
        norm: ``post`` = LayerNorm(x + Sublayer(x)) (paper), ``pre`` = x + Sublayer(LayerNorm(x)), ``sandwich`` =
            x + Norm(Sublayer(Norm(x))) with a norm of its own after the sublayer too (Gemma 2 and 3).
        norm_type: ``layernorm`` (the paper) or ``rmsnorm`` (LLaMA: x / RMS(x) * g, no mean, no bias, computed
            in float32); ``layer_norm_eps`` is its epsilon either way.
        embedding_norm: a LayerNorm on embeddings + positions (BERT; the paper has none).
        positions: sinusoidal (section 3.5) | learned | rope (rotary) | relative (T5's learned bias per bucketed
            offset and head, ``model/positions.py``) | none.
        position_base: the base of sinusoidal and rotary frequencies (rope_theta).
        rope_layout: which dimensions rotary positions rotate together: ``interleaved`` pairs (2i, 2i+1)
            (RoFormer) or ``halves``: i with i + d/2 (LLaMA in Hugging Face's layout).
        rope_scaling: ``None`` or {"type": "linear", "factor": f} (positions divided by f) or {"type": "llama3",
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
        rotary_dim: with rotary positions, only each head's first ``rotary_dim`` dimensions turn (Phi-3.5's and
            Phi-4-mini's partial rotary); None = all of them.
        relative_buckets, relative_max_distance: T5's ``relative_attention_num_buckets`` and ``..._max_distance``.
        sinusoid_layout: ``interleaved`` = sin at even, cos at odd dimensions (the paper's equation);
            ``halves`` = sin in the first half, cos in the second (Marian / OPUS-MT); same frequencies.
        sliding_window: each token attends to at most this many latest tokens, itself included (Mistral);
            ``None`` = all earlier tokens (causal self-attention of decoders only).
        layer_types: per decoder layer, ``full`` or ``sliding`` attention (Gemma 2 and 3: five sliding layers to a
            full one); empty = every layer as ``sliding_window`` says. With it, only the sliding layers keep the
            window. local_position_base: the rotary base of the sliding layers (Gemma 3: 10,000 where the full
            layers have 1,000,000); None = ``position_base``.
        scale_embeddings: multiply token embeddings by sqrt(d_model) (section 3.4; GPT-2, BERT and some
            Marian models do not).
        share_embeddings: none | decoder (target embedding = output projection) | inputs (one table for source and
            target, the output its own: T5 v1.1) | all (all three, section 3.4).
        rescale_output: the decoder's output times d_model ** -0.5 before the projection (T5 v1.0).
        output_transform: before the output projection, LayerNorm(activation(x W + b)) (BERT's masked-LM
            head; the paper has none).
        output_bias: a bias on the pre-softmax projection (the paper has none; Marian's
            ``final_logits_bias``).
        padding_row: the last id is a padding row aiayn appended to an imported vocabulary (GPT-2, Llama have
            no padding token): never predicted, it takes no part in the training softmax nor in a sampling draw.
        pad_is_token: a language model's pad id is a word of its imported vocabulary (Gemma's ``<pad>``): generated
            as any token, as transformers does (aiayn's own pad id never is: it was never a training target).
        dropout: P_drop on sublayer outputs and on embeddings + positions (section 5.4).
        attention_dropout, activation_dropout: dropout on the attention weights and inside the
            feed-forward network (after its activation); ``None`` = ``dropout`` (as before these existed).
        mask_id: the id that stands for a masked token (masked-LM training, fill-mask, CMLM).
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
    rotary_dim: int | None = None
    query_scale: float | None = None
    attention_softcap: float | None = None
    logit_softcap: float | None = None
    n_experts: int = 0
    experts_per_token: int = 2
    expert_d_ff: int | None = None
    renorm_experts: bool = True
    qk_norm: bool = False
    layer_types: tuple[str, ...] = ()
    local_position_base: float | None = None
    padding_row: bool = False
    pad_is_token: bool = False
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
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        validate(self)

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

    @property
    def attention_break_even(self) -> int:
        """Cached positions at which a new token's attention (4 h d_k operations a key: Q K^T and the weighted
        V) costs what its layer's projections and feed-forward cost (2 per weight; a mixture's active experts)."""
        d, h, dk = self.d_model, self.n_heads, self.d_head
        ffn = self.expert_d_ff * self.experts_per_token if self.n_experts else self.d_ff
        weights = d * (h + 2 * self.kv_heads) * dk + h * dk * d + (3 if self.feed_forward == "swiglu" else 2) * d * ffn
        return max(1, weights // (2 * h * dk))

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
        return cls(**typed_fields(cls, kind_of_old(data)))

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
