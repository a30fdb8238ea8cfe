"""aiayn translators out to Hugging Face: a Marian folder that ``MarianMTModel.from_pretrained`` loads, with
the same logits, or a T5 folder for a T5-shaped model (``formats/t5.py``; CTranslate2 export:
``interop/ctranslate2.py``).

Marian's Transformer is the paper's post-norm encoder-decoder with sinusoidal positions laid out in halves
(every sin, then every cos). An aiayn model with the paper's interleaved layout is exported exactly all the
same: the d_model dimensions of the residual stream are permuted (embeddings, every projection's input or
output side, every LayerNorm), which moves sin(pos w_i) from dimension 2i to i and its cos from 2i+1 to
D/2 + i and changes nothing else (a LayerNorm does not care about the order of its dimensions).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from aiayn.decoding.config import DecodingConfig
from aiayn.formats.hf_folder import write_generation
from aiayn.formats.marian import layer_names
from aiayn.model.config import ModelConfig
from aiayn.model.transformer import EncoderDecoder
from aiayn.tokenizers.marian import MarianTokenizers

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}


def marian_problems(cfg: ModelConfig) -> list[str]:
    """The options of ``cfg`` that a Marian model cannot express (empty: it can be exported)."""
    checks = [(cfg.arch == "encoder-decoder", f"arch {cfg.arch} (Marian is an encoder-decoder)"),
              (cfg.norm == "post", "norm pre (Marian is post-norm)"),
              (cfg.positions == "sinusoidal", f"positions {cfg.positions} (Marian has sinusoidal positions)"),
              (cfg.position_base == 10000.0, f"position_base {cfg.position_base} (Marian's is 10000)"),
              (cfg.layer_norm_eps == 1e-5, f"layer_norm_eps {cfg.layer_norm_eps} (Marian's is 1e-5)"),
              (not cfg.embedding_norm, "embedding_norm (Marian has none)"),
              (not cfg.output_transform, "output_transform (Marian has none)"),
              (cfg.share_embeddings == "all", f"separate source and target vocabularies (share_embeddings "
                                              f"{cfg.share_embeddings}; not supported yet)"),
              (cfg.scale_attention, "scale_attention false (unscaled dot products)")]
    return [problem for ok, problem in checks if not ok]


def _residual_order(cfg: ModelConfig) -> Tensor:
    """The permutation of d_model that turns the interleaved sinusoid layout into halves (identity if halves)."""
    d = cfg.d_model
    if cfg.sinusoid_layout == "halves":
        return torch.arange(d)
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # new dimension j reads old order[j]


def _permuted(name: str, tensor: Tensor, order: Tensor) -> Tensor:
    """``tensor`` with its residual-stream (d_model) sides put in ``order``."""
    if name.endswith(("norm.weight", "norm.bias", "out_proj.bias", "linear2.bias")):
        return tensor[order]  # (D,)
    if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "linear1.weight")):
        return tensor[:, order]  # (out, D): reads the residual stream
    if name.endswith(("out_proj.weight", "linear2.weight")):
        return tensor[order]  # (D, in): writes the residual stream
    if name.endswith(("tokens.weight", "output.weight")):
        return tensor[:, order]  # (V, D)
    return tensor  # q/k/v/linear1 biases, output bias: not on the residual stream


def marian_tensors(model: EncoderDecoder) -> dict[str, Tensor]:
    """Marian's tensor names -> the model's tensors, permuted to the halves layout."""
    cfg, order = model.config, _residual_order(model.config)
    own = {name: _permuted(name, t.detach().float(), order) for name, t in model.state_dict().items()}
    out = {theirs: own[ours] for ours, theirs in layer_names(cfg)}
    out["model.shared.weight"] = own["src_embed.tokens.weight"]
    out["model.encoder.embed_tokens.weight"] = own["src_embed.tokens.weight"]
    out["model.decoder.embed_tokens.weight"] = own["tgt_embed.tokens.weight"]
    out["lm_head.weight"] = own["output.weight"]
    bias = own.get("output.bias", torch.zeros(cfg.target_vocab))
    out["final_logits_bias"] = bias[None]  # (1, V)
    return out


def marian_config(cfg: ModelConfig) -> dict:
    """The Hugging Face ``MarianConfig`` fields of ``cfg``."""
    separate = cfg.share_embeddings != "all"
    return dict(vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.target_vocab, d_model=cfg.d_model,
                encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
                encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
                encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=ACTIVATIONS[cfg.activation],
                dropout=cfg.dropout, max_position_embeddings=cfg.max_len, scale_embedding=cfg.scale_embeddings,
                pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.bos_id,
                forced_eos_token_id=cfg.eos_id, share_encoder_decoder_embeddings=not separate,
                tie_word_embeddings=cfg.share_embeddings != "none")


def export_hf(checkpoint: str | Path, output: str | Path, overwrite: bool = False) -> Path:
    """Write the aiayn ``checkpoint`` as a Hugging Face folder ``output``: a translator as a Marian model, a
    language model as ``LlamaForCausalLM`` (Qwen2's, Mistral's) or ``GPT2LMHeadModel``, whichever has its shape."""
    from aiayn.inference.load import load_checkpoint

    model, tokenizers = load_checkpoint(checkpoint)
    if model.config.arch == "decoder-only":
        return _export_language_model(model, tokenizers, checkpoint, output, overwrite)
    if model.config.arch != "encoder-decoder":
        raise ValueError(f"{checkpoint}: export --format hf takes translators and language models, not "
                         f"{model.config.arch} checkpoints")
    if model.config.positions == "relative":
        return _export_t5(model, tokenizers, checkpoint, output, overwrite)
    return _export_marian(model, tokenizers, checkpoint, output, overwrite)


def _export_t5(model, tokenizers, checkpoint, output, overwrite: bool) -> Path:
    from aiayn.formats.t5 import export_t5, t5_problems
    from aiayn.io.files import atomic_directory
    from aiayn.io.run import resolve_checkpoint

    problems = t5_problems(model.config)
    if problems:
        raise ValueError(f"{checkpoint}: T5 cannot express {'; '.join(problems)}")
    from aiayn.tokenizers.hf import HFTokenizers

    if not isinstance(tokenizers, HFTokenizers):
        raise ValueError(f"{checkpoint}: export --format hf writes a T5 with one tokenizer.json (an imported T5's); "
                         "this checkpoint's tokenizers are not one")
    with atomic_directory(output, "export", overwrite) as tmp:
        export_t5(model, tmp)
        write_generation(tmp, DecodingConfig.load(resolve_checkpoint(checkpoint)))
        tokenizers.save(tmp)
    return Path(output)


def _export_language_model(model, tokenizers, checkpoint, output, overwrite: bool) -> Path:
    from aiayn.formats.gemma import export_gemma, gemma2_problems, gemma_problems
    from aiayn.formats.gpt2 import export_gpt2, gpt2_problems
    from aiayn.formats.llama import export_llama, llama_problems
    from aiayn.formats.phi3 import export_phi3, phi3_problems
    from aiayn.io.files import atomic_directory
    from aiayn.io.run import resolve_checkpoint

    cfg = model.config
    shapes = {"Llama": (llama_problems, export_llama), "Phi-3": (phi3_problems, export_phi3),
              "Gemma 3": (gemma_problems, export_gemma), "Gemma 2": (gemma2_problems, export_gemma),
              "GPT-2": (gpt2_problems, export_gpt2)}  # the first that expresses the model writes it
    problems = {name: check(cfg) for name, (check, _) in shapes.items()}
    fits = [name for name, found in problems.items() if not found]
    if not fits:
        raise ValueError(f"{checkpoint}: none of " + ", ".join(f"{name} ({'; '.join(found)})" for name, found in
                                                              problems.items()) + " can express this model")
    _needs_transformers()
    vocab = cfg.vocab_size - 1 if cfg.padding_row else cfg.vocab_size  # the appended padding row stays home
    with atomic_directory(output, "export", overwrite) as tmp:
        shapes[fits[0]][1](model, vocab, tmp)
        write_generation(tmp, DecodingConfig.load(resolve_checkpoint(checkpoint)))
        tokenizers.save(tmp)
    return Path(output)


def _needs_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ValueError("export --format hf needs the transformers package: pip install transformers") from None


def _export_marian(model, tokenizers, checkpoint, output, overwrite: bool) -> Path:
    from aiayn.io.files import atomic_directory
    from aiayn.io.run import resolve_checkpoint

    problems = marian_problems(model.config)
    if problems:
        raise ValueError(f"{checkpoint}: Marian cannot express {'; '.join(problems)}")
    _needs_transformers()
    from transformers import MarianConfig, MarianMTModel

    hf = MarianMTModel(MarianConfig(**marian_config(model.config))).eval()
    missing, unexpected = hf.load_state_dict(marian_tensors(model), strict=False)
    left = [name for name in [*missing, *unexpected] if "embed_positions" not in name]  # positions: computed
    if left:
        raise ValueError(f"export: Marian tensors without a counterpart: {', '.join(left[:3])}")
    with atomic_directory(output, "export", overwrite) as tmp:
        hf.save_pretrained(tmp)
        write_generation(tmp, DecodingConfig.load(resolve_checkpoint(checkpoint)))
        _write_tokenizer(tokenizers, tmp)
    return Path(output)


def _write_tokenizer(tokenizers, folder: Path) -> None:
    """Marian's tokenizer files: the SentencePiece models as source.spm / target.spm and vocab.json."""
    if isinstance(tokenizers, MarianTokenizers):  # an imported Marian checkpoint: its own files
        tokenizers.save(folder)
        return
    if not tokenizers.joint:
        raise ValueError("export --format hf: separate source and target vocabularies are not supported yet")
    sp = tokenizers.src.sp
    (folder / "source.spm").write_bytes(tokenizers.src.proto)
    (folder / "target.spm").write_bytes(tokenizers.tgt.proto)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
