"""The Transformer family's common base and two of its members, assembled from the same parts by builder functions.

- EncoderDecoder: the paper's model (Figure 1).
- EncoderOnly: BERT-style bidirectional encoder with a token-level output head.
- DecoderOnly, the GPT-style language model, lives in ``model/decoder_only.py``.

The non-autoregressive encoder-decoders (CMLM, CTC) share ``EncoderDecoderBody`` and live in
``model/nonautoregressive.py``; ``model/build.py`` builds and loads whichever a config names.

Masks are bool, True = may attend; a source's padding is derived from ``config.pad_id``, a language model's is where
the engine put it (``left_pad``), never a token's value.
Shape legend: B batch, S source length, T target length, V vocabulary, D d_model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from aiayn.io.checkpoint import CONFIG, load_weights, verify_checkpoint, write_checkpoint
from aiayn.model.builders import OutputTransform, build_decoder, build_embedding, build_encoder, build_output
from aiayn.model.cache import DecoderCache
from aiayn.model.config import ModelConfig
from aiayn.model.embeddings import TokenEmbedding
from aiayn.model.init import init_weights, uninitialised
from aiayn.model.masks import decoder_inputs, key_mask, padding_mask
from aiayn.model.state import DecodeState


@dataclass
class Runtime:
    """What a loaded model is given at run time, in one declared record (none of it saved with the weights).

    Attributes:
        static: the compiled static step (``inference/compiled.py``'s ``CompiledStep``), once attached; None eager.
        adapter_rows: many LoRA adapters in one batch (``model/multi_lora.py``'s ``AdapterRows``), once attached.
        world: the processes the model is split over (``inference/tensor_parallel.py``); 1, whole.
        precision: the ``inference/precision.py::Precision`` its layers were made for; None, as built or loaded.
        kv_cache_dtype: the KV caches' dtype (``torch.int8``: the int8 KV cache, ``model/kv_int8.py``); None, the
            weights' dtype.
    """

    static: Callable | None = None
    adapter_rows: object | None = None
    world: int = 1
    precision: object | None = None
    kv_cache_dtype: torch.dtype | None = None


class TransformerModel(nn.Module):
    """What every family member shares: its config, save/load, and the step interface decoding drives.

    Decoding (``aiayn.decoding``) talks to every member the same way: ``start(inputs)`` gives the first
    tokens and a :class:`DecodeState` (with its KV cache), ``step(tokens, state)`` the next-token logits,
    ``state.reorder(index)`` follows beam search. Members that cannot generate say so.
    """

    arch = ""
    kind = "autoregressive"  # how the decoder fills the target (``ModelConfig.kind``)

    def __init__(self, config: ModelConfig) -> None:
        """A preset's config (arch encoder-decoder, the default) is taken by every member: its sizes are
        kept and its arch set to this class's; a config made for another member is an error."""
        super().__init__()
        if config.arch == "encoder-decoder" and self.arch != config.arch:
            config = config.replace(arch=self.arch)
        if config.arch != self.arch:
            raise ValueError(f"arch: {type(self).__name__} needs arch={self.arch!r}, got {config.arch!r}")
        if config.kind != self.kind:
            raise ValueError(f"kind: {type(self).__name__} needs kind={self.kind!r}, got {config.kind!r} "
                             "(aiayn.model.build.build_model builds the member a config names)")
        self.config = config
        self.runtime = Runtime()  # what using it attaches (never saved)

    def save(self, folder: str | Path) -> None:
        """Write ``config.json`` + ``model.safetensors`` into ``folder`` atomically."""
        write_checkpoint(folder, self)

    @classmethod
    def load(cls, folder: str | Path, build: Callable[[ModelConfig], TransformerModel] | None = None,
             convert: Callable[[nn.Module], object] | None = None, verify: bool = True) -> TransformerModel:
        """Rebuild this member from ``config.json`` and ``model.safetensors`` (no pickle), in eval mode; the
        folder's files are checked against its checksums first (``verify``; False where the caller just did).
        ``build``: what makes the model of the config (default this class; ``aiayn.load_model`` loads whichever
        member a folder holds); ``convert``: made an inference copy layer by layer as it is read
        (``io.checkpoint.load_weights``; layers built uninitialised)."""
        if build is None and cls is TransformerModel:
            raise TypeError("TransformerModel.load: load a member (EncoderDecoder.load, ...), or any with "
                            "aiayn.load_model(folder)")
        folder = Path(folder)
        if verify:
            verify_checkpoint(folder)
        with uninitialised():
            model = (build or cls)(ModelConfig.load(folder / CONFIG))
        load_weights(model, folder, convert)
        return model.eval()

    def new_cache(self, batch: int, max_len: int, like: Tensor) -> DecoderCache:
        """A preallocated decoder cache for ``batch`` rows and ``max_len`` positions, on ``like``'s device; it holds
        the key/value heads the layers have (this rank's alone when split: ``inference/tensor_parallel.py``)."""
        cfg = self.config
        windows = ([cfg.sliding_window if t == "sliding" else None for t in cfg.layer_types]
                   or [cfg.sliding_window] * cfg.n_decoder_layers)  # a sliding layer's cache is a ring of its window
        return DecoderCache.allocate(cfg.n_decoder_layers, batch, self.cache_heads, max_len, cfg.d_head, like.device,
                                     self.runtime.kv_cache_dtype or like.dtype, windows)

    @property
    def cache_heads(self) -> int:
        """The key/value heads a layer's cache holds (this rank's alone when split)."""
        cfg = self.config
        return self.decoder.layers[0].self_attn.n_kv_heads if cfg.n_decoder_layers else cfg.kv_heads

    def start(self, inputs: Tensor, max_new_tokens: int, use_cache: bool = True,
              beams: int = 1) -> tuple[Tensor, DecodeState]:
        """Begin decoding ``inputs`` (B, S): the first tokens (B*beams, t0) and the state for :meth:`step`,
        with room in its cache for ``max_new_tokens``. Each input stands for ``beams`` consecutive rows."""
        raise TypeError(f"{type(self).__name__} cannot generate: use an EncoderDecoder or DecoderOnly")

    def step(self, tokens: Tensor, state: DecodeState, last: bool = False) -> Tensor:
        """Logits (B, t', V) for every column of ``tokens`` (B, t) not yet in the state's cache; with ``last``,
        for the last column alone, (B, 1, V): a prompt's other columns skip the output projection."""
        raise TypeError(f"{type(self).__name__} cannot generate: use an EncoderDecoder or DecoderOnly")

    def step_together(self, parts: list[tuple[Tensor, DecodeState]]) -> list[Tensor]:
        """:meth:`step` with ``last`` of several batches (each its tokens and state): each one's logits (b, 1, V).
        Here one pass each; a member that can runs them in one pass (``DecoderOnly``)."""
        return [self.step(tokens, state, last=True) for tokens, state in parts]


class EncoderDecoderBody(TransformerModel):
    """What every encoder-decoder has (Figure 1's parts): the source and target embeddings, the encoder, the
    decoder and the output projection; ``encode`` and ``project``. How the decoder fills the target is the
    member's: one token after another (:class:`EncoderDecoder`) or every position at once
    (``model/nonautoregressive.py``)."""

    arch = "encoder-decoder"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        cfg = config
        src_tokens = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings, cfg.pad_id)
        tgt_tokens = (src_tokens if cfg.share_embeddings in ("all", "inputs")
                      else TokenEmbedding(cfg.target_vocab, cfg.d_model, cfg.scale_embeddings, cfg.pad_id))
        self.src_embed = build_embedding(cfg, src_tokens)
        self.tgt_embed = build_embedding(cfg, tgt_tokens)
        self.encoder = build_encoder(cfg)
        self.decoder = build_decoder(cfg)
        self.output = build_output(cfg, cfg.target_vocab, tgt_tokens)
        init_weights(self)

    def encode(self, src_ids: Tensor, need_weights: bool = False) -> Tensor:
        """Source ids (B, S) -> memory (B, S, D); padding never attended to."""
        memory, _ = self._encode(src_ids, need_weights)
        return memory

    def _encode(self, src_ids: Tensor, need_weights: bool) -> tuple[Tensor, list[dict[str, Tensor]]]:
        mask = key_mask(padding_mask(src_ids, self.config.pad_id))  # (B, 1, 1, S)
        return self.encoder(self.src_embed(src_ids), mask, need_weights)

    def project(self, hidden: Tensor, output: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """The pre-softmax projection (B, T, D) -> (B, T, V) (section 3.4), the decoder's output first scaled by
        d_model ** -0.5 with ``rescale_output`` (T5 v1.0: its output weight is the unscaled embedding)."""
        if self.config.rescale_output:
            hidden = hidden * self.config.d_model ** -0.5
        return capped((self.output if output is None else output)(hidden), self.config)


class EncoderDecoder(EncoderDecoderBody):
    """The Transformer of Figure 1. ``forward(src_ids (B, S), tgt_in_ids (B, T)) -> logits (B, T, V)``."""

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        src_mask = padding_mask(src_ids, self.config.pad_id)  # (B, S)
        return self.decode(tgt_in_ids, self.encode(src_ids), src_mask)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               cache: DecoderCache | None = None, left_pad: Tensor | None = None,
               output: Callable[[Tensor], Tensor] | None = None, last: bool = False) -> Tensor:
        """Next-token logits (B, T, V) for target ids (B, T); with ``last``, the last column's alone (B, 1, V).

        Args:
            memory: (B, S, D) from :meth:`encode`; src_mask: (B, S) bool, True = real source token.
            cache, left_pad, output, last: as :meth:`DecoderOnly.decode` takes them (the same signature after
                the source's two): a cache's new positions only; left padding of rows that joined a running
                batch later (``aiayn.decoding.engine``; its BOS is position 0); another output projection.
        """
        hidden, _ = self._decode(tgt_ids, memory, src_mask, cache, need_weights=False, left_pad=left_pad)
        return self.project(hidden[:, -1:] if last else hidden, output)

    def _decode(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor | None, cache: DecoderCache | None,
                need_weights: bool, left_pad: Tensor | None = None) -> tuple[Tensor, list[dict[str, Tensor]]]:
        self_mask, local, positions = decoder_inputs(tgt_ids, self.config.pad_id, offset_of(cache), left_pad,
                                                     first_is_real=True, **windows_of(self.config))
        cross_mask = None if src_mask is None else key_mask(src_mask)  # (B, 1, 1, S)
        if cache is not None:
            cache.mark_padding(left_pad)
        x = self.tgt_embed(tgt_ids, positions)
        return self.decoder(x, memory, self_mask, cross_mask, cache, positions, need_weights, local)

    def encoded(self, inputs: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """What cached decoding reads of sources (B, S): the encoder's memory (B, S, D) and each decoder layer's
        cross-attention keys and values of it (B, H, S, D), computed once per source (a translator's prompt
        cache keeps them: ``decoding/source_cache.py::SourceCache``)."""
        memory = self.encode(inputs)
        return memory, self._cross_kv(memory)

    def _cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]

    def start(self, inputs: Tensor, max_new_tokens: int, use_cache: bool = True, beams: int = 1,
              encoded: tuple[Tensor, list[tuple[Tensor, Tensor]]] | None = None) -> tuple[Tensor, DecodeState]:
        """Encode the source once (its memory and cross-attention keys/values repeated for the beams), or take
        ``encoded`` (:meth:`encoded` of ``inputs``, kept); decoding starts from BOS."""
        source, cross = encoded if encoded is not None else (self.encode(inputs), None)  # (B, S, D)
        memory = source.repeat_interleave(beams, dim=0)  # (B*beams, S, D)
        src_mask = padding_mask(inputs, self.config.pad_id).repeat_interleave(beams, dim=0)  # (B*beams, S)
        if bool(src_mask.all()):
            src_mask = None  # no padding: no mask, the fastest attention path
        cache = None
        if use_cache:
            cache = self.new_cache(memory.size(0), 1 + max_new_tokens, memory)
            for kv, kept in zip(cross or self._cross_kv(source), cache.layers, strict=True):  # (B, H, S, D) each
                kept.cross_kv = kv if beams == 1 else tuple(t.repeat_interleave(beams, dim=0) for t in kv)
        bos = torch.full((memory.size(0), 1), self.config.bos_id, dtype=torch.long, device=inputs.device)
        return bos, DecodeState(cache, memory, src_mask)

    def step(self, tokens: Tensor, state: DecodeState, last: bool = False) -> Tensor:
        new = tokens[:, state.position:]  # (B, t'): the columns not yet in the cache
        return self.decode(new, state.memory, state.src_mask, cache=state.cache, left_pad=state.left_pad,
                           output=state.output, last=last)

    def attention_maps(self, src_ids: Tensor, tgt_in_ids: Tensor) -> dict[str, list[Tensor]]:
        """Per-layer, per-head weights: encoder (B, H, S, S), decoder_self (B, H, T, T), cross (B, H, T, S)."""
        src_mask = padding_mask(src_ids, self.config.pad_id)
        memory, enc_w = self._encode(src_ids, need_weights=True)
        _, dec_w = self._decode(tgt_in_ids, memory, src_mask, None, need_weights=True)
        return {"encoder": [w["self"] for w in enc_w], "decoder_self": [w["self"] for w in dec_w],
                "cross": [w["cross"] for w in dec_w]}


class EncoderOnly(TransformerModel):
    """BERT-style encoder: ``forward(ids (B, S)) -> per-token logits (B, S, V)`` (e.g. masked tokens)."""

    arch = "encoder-only"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = TokenEmbedding(config.vocab_size, config.d_model, config.scale_embeddings, config.pad_id)
        self.embed = build_embedding(config, tokens)
        self.encoder = build_encoder(config)
        self.transform = OutputTransform(config) if config.output_transform else None
        self.output = build_output(config, config.vocab_size, tokens)
        init_weights(self)

    def forward(self, ids: Tensor) -> Tensor:
        hidden = self.encode(ids)
        if self.transform is not None:
            hidden = self.transform(hidden)
        return self.output(hidden)

    def encode(self, ids: Tensor, real: Tensor | None = None) -> Tensor:
        """Hidden states (B, S, D) of ids (B, S), padding never attended to. ``real``: (B, S) bool, True =
        a real token; default ``ids != pad_id`` (give it when a real token may have the pad id)."""
        real = padding_mask(ids, self.config.pad_id) if real is None else real
        hidden, _ = self.encoder(self.embed(ids), key_mask(real))  # mask (B, 1, 1, S)
        return hidden


def offset_of(cache: DecoderCache | None) -> int | None:
    """The cache's position (the new ids come after it); None without a cache."""
    return None if cache is None else cache.position


def windows_of(cfg: ModelConfig) -> dict[str, int | None]:
    """``decoder_inputs``' windows: a Mistral-style window holds for every layer; with ``layer_types`` it holds for
    the sliding layers alone."""
    local = cfg.sliding_window if "sliding" in cfg.layer_types else None
    return {"window": None if cfg.layer_types else cfg.sliding_window, "local_window": local}


def capped(logits: Tensor, cfg: ModelConfig) -> Tensor:
    """The logits squashed as cap * tanh(logits / cap) with ``logit_softcap`` (Gemma 2); else as they are."""
    cap = cfg.logit_softcap
    return logits if cap is None else cap * torch.tanh(logits / cap)
