"""One record per llama.cpp architecture aiayn reads and writes (llama.cpp's converter classes as the anchor).

A GGUF file names its architecture (``general.architecture``); the record says how its tensors are named, how its
metadata becomes the Hugging Face ``config.json`` the family's importer reads, which of aiayn's configs that
makes, and how its rows are laid out. The reader (``formats/gguf.py``) and the writer (``interop/gguf_export.py``)
look an architecture up here (``formats/families.py`` holds each family's) instead of branching on its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor

from aiayn.formats import gemma, gpt2, llama, moe, phi3

LLAMA_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate_inp": "mlp.gate",
               "ffn_gate_exps": "mlp.experts.gate", "ffn_up_exps": "mlp.experts.up",  # a mixture's router and its
               "ffn_down_exps": "mlp.experts.down_proj"}  # experts, (E, F, D) and (E, D, F)
LLAMA_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
PHI3_NAMES = {**LLAMA_NAMES, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}  # Phi's fused ones
GEMMA_NAMES = {**LLAMA_NAMES, "ffn_norm": "pre_feedforward_layernorm",  # Gemma's sandwich norms
               "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
GEMMA_LOCAL_BASE, GEMMA_PATTERN = 10_000.0, 6  # what llama.cpp fixes for gemma3: the sliding layers' rotary base,
# and every sixth layer full
GPT2_NAMES = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
GPT2_TOP = {"token_embd": "transformer.wte", "position_embd": "transformer.wpe", "output_norm": "transformer.ln_f",
            "output": "lm_head"}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")  # GPT-2's (in, out)


class GGUFFile(Protocol):
    """What an architecture's record reads of an open file (``formats/gguf.py::GGUFFile``)."""

    arch: str  # general.architecture
    meta: dict[str, Any]  # every key -> its value
    tensors: dict[str, Any]  # name -> the file's tensor (its shape)

    def get(self, key: str, default=None): ...  # {arch}.key, or default

    def need(self, key: str): ...  # {arch}.key, a ValueError naming the file where it is missing

    def tensor(self, name: str) -> Tensor: ...  # one tensor, as float32


@dataclass(frozen=True)
class GGUFArch:
    """One llama.cpp architecture.

    Args:
        name: its ``general.architecture``.
        config: (the file, the keys every architecture has) -> the Hugging Face ``config.json`` (as a dict) that
            the file's metadata describes.
        model_config: (that dict, the tokenizer's unknown id) -> aiayn's ModelConfig.
        layer: GGUF -> Hugging Face names of a layer's tensors (``attn_q`` -> ``self_attn.q_proj``).
        top: GGUF -> Hugging Face names of the tensors outside the layers.
        block: Hugging Face's prefix of the layers' tensors (``model.layers``: ``model.layers.3.``).
        interleaved: llama.cpp's converter permuted the q/k rows into interleaved rotary pairs (its ``llama``).
        fused: q/k/v and gate/up stored as one matrix each (Phi-3's), split when read, joined when written.
        transposed: Hugging Face tensors stored (in, out) (GPT-2's Conv1D); the file holds them (out, in).
        rotary: rotary positions and RMS norms (every architecture here but GPT-2's learned positions, which has a
            loader of its own).
        output_copy: the file's ``output.weight`` is a copy of ``token_embd.weight`` (GPT-2's tied output).
        sliding: the file carries ``attention.sliding_window``.
        softcaps: the file carries Gemma 2's logit soft caps.
        expert_ff: the file carries its experts' ``expert_feed_forward_length``.
        special_ids: the start, end and padding ids are the model's (Gemma's rows), written over the tokenizer's.
    """

    name: str
    config: Callable[[GGUFFile, dict], dict]
    model_config: Callable[[dict, int | None], object]
    layer: dict[str, str] = field(default_factory=lambda: LLAMA_NAMES)
    top: dict[str, str] = field(default_factory=lambda: LLAMA_TOP)
    block: str = "model.layers"
    interleaved: bool = False
    fused: bool = False
    transposed: tuple[str, ...] = ()
    rotary: bool = True
    output_copy: bool = False
    sliding: bool = False
    softcaps: bool = False
    expert_ff: bool = False
    special_ids: bool = False


def _gpt2(f: GGUFFile, common: dict) -> dict:
    """GPT-2's ``config.json``: learned positions, its layer norm's epsilon, its one end id."""
    d = f.need("embedding_length")
    return dict(common, n_embd=d, n_layer=f.need("block_count"), n_head=f.need("attention.head_count"),
                n_inner=f.get("feed_forward_length", 4 * d), n_positions=f.need("context_length"),
                layer_norm_epsilon=f.get("attention.layer_norm_epsilon", 1e-5), activation_function="gelu_new",
                eos_token_id=common["eos_token_id"][0] if common["eos_token_id"] else None, resid_pdrop=0.0)


def _llama(f: GGUFFile, common: dict) -> dict:
    """A Llama / Qwen ``config.json``: its shape, norms and rotary positions (Llama 3.1's scaled frequencies read
    from ``rope_freqs.weight``, a divisor of each)."""
    heads = f.need("attention.head_count")
    scaling = f.get("rope.scaling.type")
    rope = {"rope_type": "linear", "factor": f.need("rope.scaling.factor")} if scaling == "linear" else (
        None if scaling in (None, "none") else {"rope_type": scaling})
    if "rope_freqs.weight" in f.tensors:
        rope = {"rope_type": "factors", "factors": f.tensor("rope_freqs.weight").tolist()}
    return dict(common, hidden_size=f.need("embedding_length"), intermediate_size=f.need("feed_forward_length"),
                num_hidden_layers=f.need("block_count"), num_attention_heads=heads,
                num_key_value_heads=f.get("attention.head_count_kv", heads), head_dim=f.get("attention.key_length"),
                rms_norm_eps=f.get("attention.layer_norm_rms_epsilon", 1e-6), rope_theta=f.get("rope.freq_base", 1e4),
                rope_scaling=rope, max_position_embeddings=f.get("context_length", 2048),
                tie_word_embeddings="output.weight" not in f.tensors)


def _llama_or_mixtral(f: GGUFFile, common: dict) -> dict:
    """llama.cpp's ``llama``: a Llama (an output bias: attention_bias) or, with experts, a Mixtral."""
    hf = dict(_llama(f, common), attention_bias="blk.0.attn_output.bias" in f.tensors)
    if f.get("expert_count"):
        hf.update(model_type="mixtral", num_local_experts=f.get("expert_count"),
                  num_experts_per_tok=f.need("expert_used_count"))
    return hf


def _qwen3moe(f: GGUFFile, common: dict) -> dict:
    """A Qwen3-MoE ``config.json``: llama.cpp's qwen3moe renormalises the chosen experts' weights."""
    return dict(_llama(f, common), model_type="qwen3_moe", num_experts=f.need("expert_count"),
                num_experts_per_tok=f.need("expert_used_count"),
                moe_intermediate_size=f.need("expert_feed_forward_length"), norm_topk_prob=True)


def _phi3(f: GGUFFile, common: dict) -> dict:
    """A Phi-3 ``config.json``: partial rotary positions (the rotated share of each head), a sliding window."""
    head = f.get("attention.key_length", f.need("embedding_length") // f.need("attention.head_count"))
    return dict(_llama(f, common), sliding_window=f.get("attention.sliding_window"),
                partial_rotary_factor=f.get("rope.dimension_count", head) / head)


def _gemma(f: GGUFFile, common: dict) -> dict:
    """A Gemma 3 text (or Gemma 2) ``config.json``, with what llama.cpp fixes for gemma3 (the sliding layers'
    rotary base, every sixth layer full) and gemma2 (sliding and full layers alternating, one rotary base), and
    for both the query scale of the head size; its norm gains are stored as 1 + w already."""
    head = f.need("attention.key_length")
    factor = f.get("rope.scaling.factor")
    theta, local = f.get("rope.freq_base", 1e6), GEMMA_LOCAL_BASE
    if f.arch == "gemma2":
        theta = local = f.get("rope.freq_base", 1e4)
        common = dict(common, attn_logit_softcapping=f.get("attn_logit_softcapping") or None,
                      final_logit_softcapping=f.get("final_logit_softcapping") or None)  # 0: none
    return dict(common, model_type="gemma2" if f.arch == "gemma2" else "gemma3_text",
                hidden_size=f.need("embedding_length"), intermediate_size=f.need("feed_forward_length"),
                num_hidden_layers=f.need("block_count"), num_attention_heads=f.need("attention.head_count"),
                num_key_value_heads=f.get("attention.head_count_kv", f.need("attention.head_count")), head_dim=head,
                query_pre_attn_scalar=head, rms_norm_eps=f.get("attention.layer_norm_rms_epsilon", 1e-6),
                rope_theta=theta, rope_local_base_freq=local,
                rope_scaling={"rope_type": "linear", "factor": factor} if factor not in (None, 1.0) else None,
                sliding_window=f.need("attention.sliding_window"), sliding_window_pattern=GEMMA_PATTERN,
                max_position_embeddings=f.get("context_length", 32768),
                pad_token_id=f.meta.get("tokenizer.ggml.padding_token_id", 0),
                tie_word_embeddings="output.weight" not in f.tensors,
                bos_token_id=f.meta.get("tokenizer.ggml.bos_token_id", 2))


def _llama_model(hf: dict, unk: int | None):
    """A Llama, or a Mixtral: llama.cpp writes both as ``llama``."""
    return (moe.moe_config if hf["model_type"] == "mixtral" else llama.llama_config)(hf, unk)


GPT2 = GGUFArch("gpt2", _gpt2, lambda hf, unk: gpt2.gpt2_config(hf), layer=GPT2_NAMES, top=GPT2_TOP,
                block="transformer.h", transposed=CONV1D, rotary=False, output_copy=True)
LLAMA = GGUFArch("llama", _llama_or_mixtral, _llama_model, interleaved=True)
QWEN2 = GGUFArch("qwen2", _llama, llama.llama_config)
QWEN3 = GGUFArch("qwen3", _llama, llama.llama_config)
GEMMA3 = GGUFArch("gemma3", _gemma, gemma.gemma_config, layer=GEMMA_NAMES, sliding=True, special_ids=True)
GEMMA2 = GGUFArch("gemma2", _gemma, gemma.gemma_config, layer=GEMMA_NAMES, sliding=True, softcaps=True,
                  special_ids=True)
PHI3 = GGUFArch("phi3", _phi3, phi3.phi3_config, layer=PHI3_NAMES, fused=True, sliding=True)
QWEN3MOE = GGUFArch("qwen3moe", _qwen3moe, moe.moe_config, expert_ff=True)


def hf_name(name: str, arch: GGUFArch) -> str | None:
    """Hugging Face's name of a GGUF tensor name (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``); None: a name aiayn has no place for."""
    parts = name.split(".")
    if len(parts) == 2 and parts[0] in arch.top:
        return f"{arch.top[parts[0]]}.{parts[1]}"
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in arch.layer:
        return f"{arch.block}.{parts[1]}.{arch.layer[parts[2]]}.{parts[3]}"
    return None


def gguf_name(hf: str, arch: GGUFArch) -> str:
    """The GGUF name of a Hugging Face tensor name (``hf_name`` backwards)."""
    stem, kind = hf.rsplit(".", 1)
    for theirs, ours in arch.top.items():
        if stem == ours:
            return f"{theirs}.{kind}"
    _, _, index, rest = stem.split(".", 3)  # transformer.h.I.rest / model.layers.I.rest
    for theirs, ours in arch.layer.items():
        if rest == ours:
            return f"blk.{index}.{theirs}.{kind}"
    raise ValueError(f"{hf}: no GGUF name")
