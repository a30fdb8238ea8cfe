"""aiayn's language models out to GGUF, the file llama.cpp runs: every decoder-only checkpoint whose shape
llama.cpp has (Llama's, Qwen2's, Mistral's, GPT-2's: what ``export --format hf`` writes), imported or trained by aiayn.

The tensors are the Hugging Face export's (``llama_tensors``, ``gpt2_tensors``) under GGUF's names, a ``llama``
model's q/k rows permuted to llama.cpp's interleaved rotary pairs (``gguf.permute``), GPT-2's Conv1D weights
back to (out, in); the tokenizer goes in as ``tokenizer.ggml.*`` metadata (``gguf_vocab``), with the chat
template and the checkpoint's sampling defaults. 1-D tensors (norms, biases) stay float32, as llama.cpp's own
converter keeps them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from torch import Tensor

from aiayn.formats import gemma, gpt2, llama, phi3
from aiayn.formats.families import GGUF_ARCHITECTURES
from aiayn.formats.gguf import gguf_package, permute
from aiayn.formats.gguf_arch import GEMMA_LOCAL_BASE, GEMMA_PATTERN, GGUFArch, gguf_name
from aiayn.formats.gguf_vocab import UNUSED, gguf_tokenizer_fields
from aiayn.model.positions import rope_frequencies

QUANTIZATIONS = ("f32", "f16", "bf16", "q8_0", "q4_0")
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0",
              "q4_0": "MOSTLY_Q4_0"}  # general.file_type (gguf.LlamaFileType)


def gguf_architecture(cfg, source: str) -> GGUFArch:
    """The llama.cpp architecture with this model's shape (gemma3, gemma2, qwen3moe, phi3, llama, qwen2, qwen3,
    gpt2); anything else is refused with what each lacks."""
    return GGUF_ARCHITECTURES[_architecture(cfg, source)]


def _architecture(cfg, source: str) -> str:
    """The name of ``gguf_architecture``'s choice."""
    if cfg.arch != "decoder-only":
        raise ValueError(f"{source}: export --format gguf takes language models (decoder-only), not {cfg.arch}")
    as_gemma = gemma.gemma_problems(cfg) + _gemma_fixed(cfg)
    if not as_gemma:
        return "gemma3"
    if not gemma.gemma2_problems(cfg) + _gemma2_fixed(cfg):
        return "gemma2"
    if cfg.rotary_dim is not None and not phi3.phi3_problems(cfg):  # partial rotary positions: llama.cpp's phi3
        return "phi3"
    if cfg.n_experts:  # llama.cpp's mixtures: qwen3moe (Qwen3's q/k norms) or llama (Mixtral), both renormalised
        as_moe = llama.llama_problems(cfg)
        as_moe += [] if cfg.renorm_experts else ["a mixture whose chosen experts' weights are not renormalised"]
        if not as_moe:
            return "qwen3moe" if cfg.qk_norm else "llama"
        raise ValueError(f"{source}: none of llama.cpp's mixtures (qwen3moe, llama) can express this model "
                         f"({'; '.join(as_moe)})")
    factors = cfg.rope_scaling is not None and cfg.rope_scaling["type"] == "factors"
    as_llama = [p for p in llama.llama_problems(cfg) if not (factors and p.startswith("rope_scaling factors"))]
    as_gpt2 = gpt2.gpt2_problems(cfg)
    if not as_llama:
        kind = llama.hf_model_type(cfg)
        return kind if kind in ("qwen2", "qwen3") else "llama"
    if not as_gpt2:
        return "gpt2"
    raise ValueError(f"{source}: none of llama.cpp's llama ({'; '.join(as_llama)}), gemma3 ({'; '.join(as_gemma)}) "
                     f"and gpt2 ({'; '.join(as_gpt2)}) can express this model")


def _gemma_fixed(cfg) -> list[str]:
    """What llama.cpp fixes for gemma3 rather than reads, that ``cfg`` must match: every sixth layer full, the
    others sliding with a rotary base of 10,000."""
    pattern = gemma.layer_pattern(cfg.n_decoder_layers, GEMMA_PATTERN)
    problems = [] if cfg.layer_types == pattern else ["layer_types other than five sliding layers to a full one"]
    if (cfg.local_position_base or cfg.position_base) != GEMMA_LOCAL_BASE:
        problems.append(f"local_position_base other than {GEMMA_LOCAL_BASE:g}")
    return problems


def _gemma2_fixed(cfg) -> list[str]:
    """What llama.cpp fixes for gemma2: sliding and full layers alternating, the query scale of the head size."""
    problems = [] if cfg.layer_types == gemma.layer_pattern(cfg.n_decoder_layers, 2) else [
        "layer_types other than sliding and full alternating"]
    return problems + ([] if cfg.query_scale in (None, cfg.d_head) else ["a query scale other than the head size"])


def gguf_tensors(model, arch: GGUFArch, vocab: int) -> dict[str, Tensor]:
    """GGUF name -> float32 tensor of ``model`` (its first ``vocab`` token rows)."""
    cfg = model.config
    if not arch.rotary:  # GPT-2's
        hf = gpt2.gpt2_tensors(model, vocab)
        out = {gguf_name(k, arch): (v.t() if k.endswith(arch.transposed) else v) for k, v in hf.items()}
        if arch.output_copy:
            out["output.weight"] = out["token_embd.weight"]  # llama.cpp's converter writes GPT-2's tied output too
        return out
    # norm gains as they are: gemma files keep Gemma's 1 + w too; phi3's projections fused
    hf = phi3.phi3_tensors(model, vocab) if arch.fused else llama.llama_tensors(model, vocab)
    if cfg.share_embeddings != "none":
        del hf["lm_head.weight"]  # tied: llama.cpp falls back to token_embd
    out = {}
    for name, t in hf.items():
        if ".mlp.experts." in name:  # (E, 2F, D) gate and up, (E, D, F) down: llama.cpp's ffn_*_exps
            block = f"blk.{name.split('.')[2]}"
            if name.endswith("gate_up_proj"):
                out[f"{block}.ffn_gate_exps.weight"], out[f"{block}.ffn_up_exps.weight"] = t.chunk(2, dim=1)
            else:
                out[f"{block}.ffn_down_exps.weight"] = t
            continue
        if arch.interleaved and (".q_proj." in name or ".k_proj." in name):
            t = permute(t, cfg.n_heads if ".q_proj." in name else cfg.kv_heads)
        out[gguf_name(name, arch)] = t
    if cfg.rope_scaling is not None and cfg.rope_scaling["type"] != "linear":  # llama3, factors: llama.cpp's way
        out["rope_freqs.weight"] = rope_frequencies(cfg.d_head, cfg.position_base) / rope_frequencies(
            cfg.d_head, cfg.position_base, cfg.rope_scaling)  # (D/2,): each frequency's divisor
    return out


def _add_hyperparameters(writer, cfg, arch: GGUFArch, vocab: int) -> None:
    """The architecture's hyper-parameters (``{arch}.*``), those its record says it carries."""
    writer.add_context_length(cfg.max_len)
    writer.add_embedding_length(cfg.d_model)
    writer.add_block_count(cfg.n_decoder_layers)
    writer.add_feed_forward_length(cfg.d_ff)
    writer.add_head_count(cfg.n_heads)
    writer.add_vocab_size(vocab)
    if not arch.rotary:
        writer.add_layer_norm_eps(cfg.layer_norm_eps)
        return
    writer.add_head_count_kv(cfg.kv_heads)
    if cfg.n_experts:  # qwen3moe, or llama's Mixtral (its experts of feed_forward_length)
        writer.add_expert_count(cfg.n_experts)
        writer.add_expert_used_count(cfg.experts_per_token)
    if arch.expert_ff:
        writer.add_expert_feed_forward_length(cfg.expert_d_ff or cfg.d_ff)
    if arch.sliding and cfg.sliding_window:
        writer.add_sliding_window(cfg.sliding_window)
    if arch.softcaps:
        writer.add_attn_logit_softcapping(cfg.attention_softcap or 0.0)  # llama.cpp: 0, none
        writer.add_final_logit_softcapping(cfg.logit_softcap or 0.0)
    writer.add_layer_norm_rms_eps(cfg.layer_norm_eps)
    writer.add_rope_freq_base(cfg.position_base)
    writer.add_rope_dimension_count(cfg.rotary_dim or cfg.d_head)  # phi3: the rotated share of each head
    if cfg.head_dim is not None:
        writer.add_key_length(cfg.d_head)
        writer.add_value_length(cfg.d_head)
    if cfg.rope_scaling is not None and cfg.rope_scaling["type"] == "linear":
        gguf = gguf_package()
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(cfg.rope_scaling["factor"])


def _add_tokenizer(writer, tokenizers, vocab: int, decoding, ids: dict[str, int] | None = None) -> None:
    """The tokenizer's metadata; ``ids``: special ids the model's config fixes over the tokenizer's (a Gemma's
    own padding and start ids, rows of its vocabulary)."""
    fields = gguf_tokenizer_fields(tokenizers)
    fields.update({f"tokenizer.ggml.{kind}_token_id": i for kind, i in (ids or {}).items()})
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    if len(tokens) > vocab:
        raise ValueError(f"tokenizer: {len(tokens)} tokens, more than the model's {vocab} rows")
    missing = vocab - len(tokens)  # rows no token uses: named placeholders llama.cpp leaves alone
    tokens.extend(f"<unused{i}>" for i in range(missing))
    types.extend([UNUSED] * missing)
    if "tokenizer.ggml.scores" in fields:
        fields["tokenizer.ggml.scores"].extend([-1e9] * missing)
    for key, value in fields.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, list) and key.endswith(("token_type",)):
            writer.add_array(key, [int(v) for v in value])
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_string(key, value)
    sampling = {"temperature": writer.add_sampling_temp, "top_k": writer.add_sampling_top_k,
                "top_p": writer.add_sampling_top_p, "min_p": writer.add_sampling_min_p,
                "repetition_penalty": writer.add_sampling_penalty_repeat}
    for name, add in sampling.items():
        if name in decoding.changes():
            add(getattr(decoding, name))


def _stored(array: np.ndarray, quantization: str):
    """(data, raw type or None) of one float32 tensor: 1-D tensors, and rows not a multiple of 32 where the type
    stores blocks of 32 values, stay float32."""
    gguf = gguf_package()
    types = gguf.GGMLQuantizationType
    if array.ndim == 1 or quantization == "f32":
        return array, None
    if quantization == "f16":
        return array.astype(np.float16), None
    kind = {"bf16": types.BF16, "q8_0": types.Q8_0, "q4_0": types.Q4_0}[quantization]
    if kind != types.BF16 and array.shape[-1] % 32:  # blocks of 32 values along a row
        return array, None
    return gguf.quants.quantize(array, kind), kind


def write_gguf(model, tokenizers, decoding, path: Path, quantization: str = "f32", name: str = "aiayn") -> None:
    """Write ``model`` (a decoder-only aiayn model) with its tokenizer and decoding defaults as the GGUF file
    ``path`` (written in place: the caller gives a temp path)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"--quantization: {quantization!r} is not a GGUF type aiayn writes; choose "
                         f"{', '.join(QUANTIZATIONS)}")
    gguf = gguf_package()
    cfg = model.config
    arch = gguf_architecture(cfg, name)
    vocab = cfg.vocab_size - 1 if cfg.padding_row else cfg.vocab_size  # the appended padding row stays home
    writer = gguf.GGUFWriter(str(path), arch.name)
    writer.add_name(name)
    writer.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[quantization]))
    _add_hyperparameters(writer, cfg, arch, vocab)
    ids = {"bos": cfg.bos_id, "eos": cfg.eos_id, "padding": cfg.pad_id} if arch.special_ids else None
    _add_tokenizer(writer, tokenizers, vocab, decoding, ids)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tensors = gguf_tensors(model, arch, vocab)
    output = "output.weight" if "output.weight" in tensors else "token_embd.weight"  # tied: the table is the output
    for tensor_name, t in tensors.items():
        router = tensor_name.endswith("ffn_gate_inp.weight")  # a mixture's router stays float32, as llama.cpp's
        kind = "f32" if router else "q8_0" if quantization == "q4_0" and tensor_name == output else quantization
        data, raw = _stored(t.numpy().astype(np.float32), kind)  # q4_0's output in Q8_0, as aiayn's --int4 keeps it
        writer.add_tensor(tensor_name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def export_gguf(checkpoint: str | Path, output: str | Path, quantization: str = "f32") -> Path:
    """``aiayn export --format gguf``: the checkpoint as one GGUF file, written to a temp file then renamed (the
    caller has claimed ``output``)."""
    from aiayn.decoding.config import DecodingConfig
    from aiayn.inference.load import load_checkpoint
    from aiayn.io.files import atomic_path
    from aiayn.io.run import resolve_checkpoint

    model, tokenizers = load_checkpoint(checkpoint)
    arch = gguf_architecture(model.config, str(checkpoint))  # refuse before writing anything
    if not arch.sliding and model.config.sliding_window is not None:  # as llama.cpp's own converter writes Mistral
        print(f"aiayn: warning: llama.cpp's llama attends to the whole context: the same model up to the sliding "
              f"window of {model.config.sliding_window} tokens, not beyond", file=sys.stderr)
    decoding = DecodingConfig.load(resolve_checkpoint(checkpoint))
    with atomic_path(output) as tmp:
        write_gguf(model, tokenizers, decoding, tmp, quantization, name=Path(str(checkpoint)).name)
    return Path(output)
