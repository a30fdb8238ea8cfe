"""aiayn translators out to CTranslate2, through its own converter API (a ``Converter`` that fills a
``TransformerSpec``): the same weights, so CTranslate2 gives the same greedy output.

The position table is written out (sinusoids in the model's own layout, or the learned table), so any
absolute-position model converts; post-norm and pre-norm (with its final LayerNorms) both; the activation,
the embedding scale and an output bias as configured. Rotary positions, an embedding LayerNorm and BERT's
output transform have no place in CTranslate2's encoder-decoder spec: a clear error names them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec

from aiayn.model.transformer import EncoderDecoder

ACTIVATIONS = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
               "gelu_tanh": common_spec.Activation.GELUTanh, "silu": common_spec.Activation.SWISH}


def ctranslate2_problems(model) -> list[str]:
    """What CTranslate2's encoder-decoder spec cannot express of ``model`` (empty: it converts)."""
    cfg = model.config
    checks = [(cfg.arch == "encoder-decoder", f"arch {cfg.arch} (an encoder-decoder is needed)"),
              (cfg.positions in ("sinusoidal", "learned"), f"positions {cfg.positions}"),
              (not cfg.embedding_norm, "embedding_norm"), (not cfg.output_transform, "output_transform"),
              (cfg.scale_attention, "scale_attention false (unscaled dot products)")]
    return [problem for ok, problem in checks if not ok]


def _np(t: torch.Tensor):
    return t.detach().float().cpu().numpy()


def _linear(spec, *linears: torch.nn.Linear) -> None:
    """Fill a CTranslate2 linear from torch linears stacked along the output dimension (fused q/k/v)."""
    spec.weight = _np(torch.cat([lin.weight for lin in linears]))
    if linears[0].bias is not None:
        spec.bias = _np(torch.cat([lin.bias for lin in linears]))


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _attention(spec, attn, norm, cross: bool = False) -> None:
    if cross:
        _linear(spec.linear[0], attn.q_proj)
        _linear(spec.linear[1], attn.k_proj, attn.v_proj)  # fused (2D, D)
        _linear(spec.linear[2], attn.out_proj)
    else:
        _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)  # fused (3D, D)
        _linear(spec.linear[1], attn.out_proj)
    _norm(spec.layer_norm, norm)


def _ffn(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.linear1)
    _linear(spec.linear_1, ffn.linear2)
    _norm(spec.layer_norm, norm)


class AiaynConverter(Converter):
    """Maps an :class:`EncoderDecoder` onto ``TransformerSpec``.

    Args:
        source_tokens, target_tokens: the token string of every id (CTranslate2 speaks tokens).
        max_len: rows of the position table (the longest source or output it can take).
    """

    def __init__(self, model: EncoderDecoder, source_tokens: list[str], target_tokens: list[str],
                 max_len: int | None = None) -> None:
        problems = ctranslate2_problems(model)
        if problems:
            raise ValueError(f"CTranslate2's encoder-decoder cannot express {'; '.join(problems)}")
        self.model, self.source_tokens, self.target_tokens = model, source_tokens, target_tokens
        self.max_len = max_len or model.config.max_len

    def _load(self):
        m, cfg = self.model, self.model.config
        pre = cfg.norm == "pre"
        spec = transformer_spec.TransformerSpec.from_config(
            (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=pre, no_final_norm=not pre,
            activation=ACTIVATIONS[cfg.activation])
        for side, embed in ((spec.encoder, m.src_embed), (spec.decoder, m.tgt_embed)):
            side.scale_embeddings = cfg.scale_embeddings
            side.position_encodings.encodings = _np(embed.positions(self.max_len, 0))  # (L, D): each side's own
        spec.encoder.embeddings[0].weight = _np(m.src_embed.tokens.weight)
        spec.decoder.embeddings.weight = _np(m.tgt_embed.tokens.weight)
        for layer_spec, layer in zip(spec.encoder.layer, m.encoder.layers, strict=True):
            _attention(layer_spec.self_attention, layer.self_attn, layer.res_attn.norm)
            _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
        for layer_spec, layer in zip(spec.decoder.layer, m.decoder.layers, strict=True):
            _attention(layer_spec.self_attention, layer.self_attn, layer.res_self.norm)
            _attention(layer_spec.attention, layer.cross_attn, layer.res_cross.norm, cross=True)
            _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
        if pre:
            _norm(spec.encoder.layer_norm, m.encoder.norm)
            _norm(spec.decoder.layer_norm, m.decoder.norm)
        _linear(spec.decoder.projection, m.output)
        spec.register_source_vocabulary(self.source_tokens)
        spec.register_target_vocabulary(self.target_tokens)
        tokens = self.target_tokens
        spec.config.bos_token, spec.config.eos_token = tokens[cfg.bos_id], tokens[cfg.eos_id]
        spec.config.unk_token, spec.config.decoder_start_token = tokens[cfg.unk_id], tokens[cfg.bos_id]
        spec.config.layer_norm_epsilon = cfg.layer_norm_eps
        return spec


def export_ctranslate2(checkpoint: str | Path, output: str | Path, quantization: str | None = None,
                       overwrite: bool = False) -> Path:
    """Write ``checkpoint`` as a CTranslate2 model folder: a translator through :class:`AiaynConverter` (its
    vocabulary the checkpoint's pieces: give CTranslate2 ``tokenizers.src.pieces(ids)``), a language model as a
    ``ctranslate2.Generator`` through its Hugging Face folder."""
    from aiayn.inference.load import load_checkpoint
    from aiayn.io.files import atomic_directory

    model, tokenizers = load_checkpoint(checkpoint)
    if model.config.arch == "decoder-only":
        return _export_language_model(checkpoint, output, quantization, overwrite)
    if model.config.arch != "encoder-decoder":
        raise ValueError(f"{checkpoint}: export --format ctranslate2 takes translators and language models")
    source = tokenizers.src.pieces(list(range(model.config.vocab_size)))
    target = tokenizers.tgt.pieces(list(range(model.config.target_vocab)))
    converter = AiaynConverter(model.eval(), source, target)
    with atomic_directory(output, "export", overwrite) as tmp:
        converter.convert(str(tmp), quantization=quantization, force=True)
    return Path(output)


def _export_language_model(checkpoint, output, quantization: str | None, overwrite: bool) -> Path:
    """A language model through its Hugging Face folder (Llama, Qwen2, Mistral or GPT-2 shaped) and
    CTranslate2's own ``TransformersConverter``, which reads those folders."""
    import tempfile

    from ctranslate2.converters import TransformersConverter

    from aiayn.interop.hf_export import export_hf
    from aiayn.io.files import atomic_directory, claim_output

    claim_output(output, "export", overwrite=overwrite)  # before the work
    with tempfile.TemporaryDirectory() as scratch:
        hf = export_hf(checkpoint, Path(scratch) / "hf")
        with atomic_directory(output, "export", overwrite) as tmp:
            TransformersConverter(str(hf)).convert(str(tmp), quantization=quantization, force=True)
    return Path(output)
