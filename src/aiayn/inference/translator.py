"""Text in, text out: a checkpoint (model + tokenizers) translating batches of sentences."""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.data.batching import pad_batch
from aiayn.data.corpus import with_prefix
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.drafts import Draft, ModelDraft
from aiayn.decoding.generation import generate
from aiayn.decoding.source_cache import SourceCache
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.inference.draft import load_draft
from aiayn.inference.load import load_checkpoint
from aiayn.inference.precision import Precision, inference_copy
from aiayn.inference.shortlist import Shortlist
from aiayn.io.run import resolve_checkpoint
from aiayn.model.kv_int8 import cache_dtype
from aiayn.model.transformer import EncoderDecoderBody, TransformerModel
from aiayn.tokenizers import TokenizerPair


class Translator:
    """Translate raw text with an encoder-decoder and its tokenizers.

    Sentences are sorted by length and decoded in batches (through :func:`aiayn.generate`), then returned
    in input order. How: a :class:`DecodingConfig` (from the checkpoint's ``generation.json`` with
    ``from_checkpoint``), resolved as everywhere (:meth:`DecodingConfig.resolve`: beam search when ``beam_size``
    > 1 unless it names a strategy, mask-predict for a CMLM); the output length is
    capped at ``max_len_a * source_length + max_len_b`` tokens. Empty (or whitespace-only) texts translate to
    "". Sources longer than the model's ``max_len`` are cut; the indices of those of the last call are in
    ``self.truncated``.
    """

    def __init__(self, model: EncoderDecoderBody, tokenizers: TokenizerPair, device: torch.device | str = "cpu",
                 decoding: DecodingConfig | None = None, int8: bool = False, bf16: bool = False,
                 packed: bool = True, draft: EncoderDecoderBody | Draft | None = None, draft_tokens: int | None = None,
                 shortlist: Shortlist | None = None, int4: bool = False, own: bool = False,
                 kv_cache_dtype: str | None = None, **options) -> None:
        """``decoding`` (default ``DecodingConfig()``) with ``options`` (its fields by name) replaced.
        ``int8``, ``int4``: weight-only int8 or int4 linear layers (CPU; ``aiayn.inference.precision.quantize``).
        ``bf16``: weights, activations and the KV cache in bfloat16 (half the memory traffic of float32; logits
        are scored in float32); ``kv_cache_dtype`` ``int8``: the int8 KV cache. ``packed``: on the CPU, decode
        with oneDNN-prepacked linear layers
        (:func:`aiayn.pack`; same results, about 2x faster).
        ``draft``: a smaller model with the same tokenizers, or any :class:`~aiayn.decoding.drafts.Draft`; greedy
        decoding then runs speculatively (the same output), proposing ``draft_tokens`` per main-model pass (None:
        adapted to the acceptance); ``self.speculative`` counts the drafted and accepted tokens. ``shortlist``: each
        batch is decoded over its candidate target tokens only (:mod:`aiayn.inference.shortlist`; faster,
        the output may differ). ``own``: ``model`` is handed over and
        made the inference copy in place, ``draft`` too (else each is copied and left as it was)."""
        if model.config.arch != "encoder-decoder":
            raise ValueError(f"translation needs an encoder-decoder checkpoint, not {model.config.arch}")
        self.decoding = (decoding or DecodingConfig()).replace(**options)
        if shortlist is not None and (int8 or int4 or draft is not None):
            raise ValueError("--shortlist: not with --int8, --int4 or --draft; choose one")
        self.model = inference_copy(model, device, int8, bf16, packed, int4, own)
        self.model.runtime.kv_cache_dtype = cache_dtype(kv_cache_dtype)  # int8: model/kv_int8.py
        if isinstance(draft, TransformerModel):
            draft = ModelDraft(inference_copy(draft, device, int8, bf16, packed, int4, own))
        self.draft, self.speculative, self.draft_tokens = draft, SpeculativeStats(), draft_tokens
        self.tokenizers, self.device, self.shortlist = tokenizers, torch.device(device), shortlist
        self.truncated: list[int] = []
        self.prompt_cache: SourceCache | None = None  # set after construction: sources seen before skip the encoder
        self.check(self.decoding)

    def check(self, decoding: DecodingConfig) -> DecodingConfig:
        """``decoding`` resolved for this model (:meth:`DecodingConfig.resolve`), or a ValueError for what this
        translator cannot decode: more than one translation per text; a draft without greedy search."""
        if decoding.num_return_sequences != 1:
            raise ValueError("num_return_sequences: a translator returns one translation per text; use "
                             "aiayn.generate for n-best lists")
        resolved = decoding.resolve(self.model.config)
        if self.draft is not None and resolved.strategy != "greedy":
            raise ValueError("--draft: speculative decoding is greedy; pass --beam-size 1")
        return resolved

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", draft: str | Path | None = None,
                        shortlist: str | Path | None = None, decoding: dict | None = None,
                        prepare=None, **options) -> Translator:
        """``path`` is a checkpoint folder or a run folder (meaning its ``best/``); ``draft`` one with the same
        tokenizers, or ``ngram`` (prompt lookup: no second model), ``int4`` or ``int8`` (this checkpoint's own
        quantized copy drafts for it: ``inference/draft.py``); ``shortlist`` is a file from ``aiayn shortlist``.
        Decoding: the checkpoint's ``generation.json`` with ``decoding`` (field -> value) replaced;
        ``prepare`` as in ``load_checkpoint``;
        other options as in __init__."""
        folder = resolve_checkpoint(path)
        model, tokenizers = load_checkpoint(folder, "encoder-decoder", prepare)
        precision = Precision(str(device), options.get("int8", False), options.get("bf16", False),
                              options.get("packed", True), options.get("int4", False))
        chosen_draft = load_draft(None if draft is None else str(draft), folder, tokenizers, "encoder-decoder",
                                  precision)
        table = None if shortlist is None else Shortlist.load(shortlist, model.config.target_vocab)
        chosen = DecodingConfig.load(folder).replace(**(decoding or {}))
        return cls(model, tokenizers, device, chosen, draft=chosen_draft, shortlist=table, own=True, **options)

    def _generate(self, src: torch.Tensor, decoding: DecodingConfig) -> list[list[int]]:
        """Best hypothesis per row."""
        cfg = self.model.config
        candidates = None if self.shortlist is None else self.shortlist.candidates(src, cfg.pad_id, cfg.eos_id)
        return generate(self.model, src, config=decoding, draft=self.draft, draft_tokens=self.draft_tokens,
                        speculative_stats=self.speculative, candidates=candidates, prompt_cache=self.prompt_cache)

    def source_text(self, text: str, decoding: DecodingConfig | None = None) -> str:
        """What the encoder reads of ``text``: whitespace normalised, led by the decoding's ``source_prefix``
        (default: this translator's) unless empty."""
        return with_prefix((decoding or self.decoding).source_prefix, " ".join(text.split()))

    def source_ids(self, text: str, decoding: DecodingConfig | None = None) -> list[int]:
        """The encoder's input for ``text`` (:meth:`source_text`, cut to max_len; [] for an empty text)."""
        return self.tokenizers.src.encode(self.source_text(text, decoding))[: self.model.config.max_len]

    @torch.no_grad()
    def translate(self, texts: list[str], batch_size: int = 64, decoding: DecodingConfig | None = None,
                  **options) -> list[str]:
        """Translate each text; empty input gives an empty list. Decoding: ``decoding`` (default: this
        translator's) with ``options`` (its fields by name) replaced."""
        decoding = self.check((decoding or self.decoding).replace(**options))
        whole = self.tokenizers.src.encode_batch([self.source_text(t, decoding) for t in texts])
        limit = self.model.config.max_len
        self.truncated = [i for i, ids in enumerate(whole) if len(ids) > limit]
        encoded = [ids[:limit] for ids in whole]
        order = sorted((i for i in range(len(texts)) if encoded[i]), key=lambda i: len(encoded[i]))
        results: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            src = pad_batch([encoded[i] for i in chunk], self.model.config.pad_id).to(self.device)
            for i, ids in zip(chunk, self._generate(src, decoding), strict=True):
                results[i] = self.tokenizers.tgt.decode(ids)
        return results
