"""The decoder-only member: a GPT-style language model (causal self-attention + FFN, no encoder, no cross-attention),
with its two ways to run one decoder: the eager step (``decode`` / ``step``, any number of new columns, the cache's
Python ints) and the static step (``step_static``: a token a row, or a few, shapes that never change, the body
``inference/compiled.py`` compiles; ``model/static.py`` has its cache and masks). Both embed, run ``self.decoder`` and
project through the same parts.

Masks are bool, True = may attend; padding is where the engine put it (``left_pad``), never a token's value.
Shape legend: B batch, T length, V vocabulary, D d_model.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import Tensor

from aiayn.model.builders import build_decoder, build_embedding, build_output
from aiayn.model.cache import DecoderCache, LayerCache
from aiayn.model.config import ModelConfig
from aiayn.model.embeddings import TokenEmbedding
from aiayn.model.init import init_weights
from aiayn.model.masks import decoder_inputs, left_align
from aiayn.model.state import DecodeState
from aiayn.model.static import StaticCache, StaticKV, slot_mask, slots_of
from aiayn.model.transformer import TransformerModel, capped, offset_of, windows_of


class DecoderOnly(TransformerModel):
    """GPT-style language model: ``forward(ids (B, T)) -> next-token logits (B, T, V)``."""

    arch = "decoder-only"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = TokenEmbedding(config.vocab_size, config.d_model, config.scale_embeddings, config.pad_id)
        self.embed = build_embedding(config, tokens)
        self.decoder = build_decoder(config, cross_attention=False)
        self.output = build_output(config, config.vocab_size, tokens)
        init_weights(self)

    def forward(self, ids: Tensor) -> Tensor:
        return self.decode(ids)

    def decode(self, ids: Tensor, cache: DecoderCache | None = None, left_pad: Tensor | None = None,
               output: Callable[[Tensor], Tensor] | None = None, last: bool = False) -> Tensor:
        """Logits (B, T, V) for ids (B, T); with a cache, ids are the new positions only; with ``last``, the
        last column's alone (B, 1, V).

        ``left_pad`` (B,): the first ``left_pad[b]`` columns of row b are padding (never attended to) and
        its real tokens start at position 0. Without it, nothing is padding by its value (causal attention keeps
        right padding from every real token; a pad id inside a text is a token, as in transformers). ``output``:
        another output projection (a shortlist's rows: logits (B, T, C)); default the model's.
        """
        x, mask, local, positions = self._inputs(ids, cache, left_pad)
        hidden, _ = self.decoder(x, None, mask, None, cache, positions, local_mask=local)
        return self._project(hidden[:, -1:] if last else hidden, output)

    def start(self, inputs: Tensor, max_new_tokens: int, use_cache: bool = True,
              beams: int = 1) -> tuple[Tensor, DecodeState]:
        """Prompts (B, T), right-padded with pad_id (``masks.prompt_lengths``: a lone prompt is all real), are
        left-aligned so that all rows continue in the same column; each row keeps its own positions and never
        attends to the padding."""
        tokens, left_pad = left_align(inputs, self.config.pad_id)  # (B, T0), (B,) or None
        tokens = tokens.repeat_interleave(beams, dim=0)  # (B*beams, T0)
        left_pad = None if left_pad is None else left_pad.repeat_interleave(beams, dim=0)
        like = next(self.parameters())  # the cache takes the model's device and dtype
        cache = self.new_cache(tokens.size(0), tokens.size(1) + max_new_tokens, like) if use_cache else None
        return tokens, DecodeState(cache, left_pad=left_pad)

    def step(self, tokens: Tensor, state: DecodeState, last: bool = False) -> Tensor:
        if self.runtime.static is not None and (logits := self.runtime.static(self, tokens, state, last)) is not None:
            return logits  # new tokens (not a prompt) through the compiled static step (inference/compiled.py)
        adapters = self.runtime.adapter_rows
        rows = nullcontext() if adapters is None else adapters.rows(state.adapters)
        with rows:  # each row's own LoRA adapter (state.adapters; None: the base model)
            return self.decode(tokens[:, state.position:], cache=state.cache, left_pad=state.left_pad,
                               output=state.output, last=last)

    def step_static(self, tokens: Tensor, column: Tensor, left_pad: Tensor, kv: list[Tensor],
                    windows: list[int | None], span: Tensor | None = None) -> Tensor:
        """Logits (B, C, V) of C new tokens a row, ``tokens`` (B, C), from cache column ``column`` (1,) on: the step
        with no Python int that changes from token to token (``model/static.py``), equal to :meth:`step`'s.

        Args:
            left_pad: (B,) padding columns in front of each row (its positions are column - left_pad).
            kv: every layer's keys and values, k0, v0, k1, v1, ... (B, H_kv, capacity_i, D), written in place.
            windows: each layer's sliding window (its cache a ring) or None.
            span: a tensor whose length is how many slots each full layer attends (``static.span_of``; past the
                last column, at most its capacity); None: every slot.
        """
        positions = column - left_pad  # (B,) each row's position at its first new column
        masks: dict[int | None, Tensor] = {}
        layers = []
        for i, window in enumerate(windows):
            k, v = kv[2 * i], kv[2 * i + 1]
            attended = span.size(0) if span is not None and window is None else None  # a ring: every slot
            if window not in masks:  # one mask per kind of layer (their rings, and their full caches, one capacity)
                size = k.size(2) if attended is None else attended
                masks[window] = slot_mask(column, left_pad, size, window, tokens.size(1))  # (B, 1, C, size)
            layers.append(LayerCache(StaticKV(k, v, slots_of(column, tokens.size(1), k.size(2)), attended)))
        local = [w for w, layer in zip(windows, self.decoder.layers, strict=True) if layer.local]
        full = [w for w, layer in zip(windows, self.decoder.layers, strict=True) if not layer.local]
        hidden, _ = self.decoder(self.embed(tokens, positions), None, masks[full[0]] if full else None, None,
                                 StaticCache(layers), positions, local_mask=masks[local[0]] if local else None)
        return self._project(hidden, None)  # (B, C, V)

    def step_together(self, parts: list[tuple[Tensor, DecodeState]]) -> list[Tensor]:
        """:meth:`step` with ``last`` of several cached batches in one pass (a long prompt's chunk inside the
        running rows' step): their new positions side by side, (1, N, D), through the norms, projections and FFN
        at once, each batch attending its own cache. Equal, to rounding, to stepping each alone."""
        if len(parts) == 1 or self.runtime.adapter_rows is not None or self.decoder.position_bias is not None:
            return super().step_together(parts)
        xs, segments = [], []
        for tokens, state in parts:
            ids = tokens[:, state.position:]  # (b, t): the columns not yet in the cache
            x, mask, local, positions = self._inputs(ids, state.cache, state.left_pad)
            xs.append(x.flatten(0, 1))  # (b*t, D)
            segments.append((*ids.shape, mask, local, state.cache, positions))
        hidden = self.decoder.forward_segments(torch.cat(xs)[None], segments)[0]  # (N, D)
        lasts = [h.view(rows, columns, -1)[:, -1]  # (b, D): each row's last column
                 for h, (rows, columns, *_) in zip(hidden.split([len(x) for x in xs]), segments, strict=True)]
        if len({id(state.output) for _, state in parts}) == 1:  # one output projection for every part's rows
            logits = self._project(torch.cat(lasts)[:, None], parts[0][1].output)  # (sum b, 1, V)
            return list(logits.split([len(h) for h in lasts]))
        return [self._project(h[:, None], state.output) for h, (_, state) in zip(lasts, parts, strict=True)]

    def _inputs(self, ids: Tensor, cache: DecoderCache | None, left_pad: Tensor | None
                ) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | int]:
        """The embedded ids (B, T, D), the self-attention and sliding masks (bool, True = may attend; (B|1, 1, T,
        offset+T) or None) and the positions of ids coming after ``cache``'s, rows padded by ``left_pad``."""
        mask, local, positions = decoder_inputs(ids, None, offset_of(cache), left_pad, **windows_of(self.config))
        if cache is not None:
            cache.mark_padding(left_pad)
        return self.embed(ids, positions), mask, local, positions

    def _project(self, hidden: Tensor, output: Callable[[Tensor], Tensor] | None) -> Tensor:
        """Logits (.., V) of hidden states (.., D) through ``output`` (None: the model's own), capped."""
        return capped((self.output if output is None else output)(hidden), self.config)

    def attention_maps(self, ids: Tensor) -> dict[str, list[Tensor]]:
        """Per-layer, per-head causal self-attention weights: decoder_self (B, H, T, T)."""
        mask, local, _ = decoder_inputs(ids, None, None, **windows_of(self.config))
        _, weights = self.decoder(self.embed(ids), None, mask, None, None, 0, need_weights=True, local_mask=local)
        return {"decoder_self": [w["self"] for w in weights]}
