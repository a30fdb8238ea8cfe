"""Text in, text out: a checkpoint (model + tokenizers) translating batches of sentences."""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.data.batching import pad_batch
from aiayn.decoding import SpeculativeStats, generate
from aiayn.inference.load import load_checkpoint
from aiayn.inference.precision import inference_copy
from aiayn.inference.shortlist import Shortlist
from aiayn.io.run import resolve_checkpoint
from aiayn.model.transformer import EncoderDecoder, TransformerModel
from aiayn.tokenizers import TokenizerPair, load_tokenizers


class Translator:
    """Translate raw text with an encoder-decoder and its tokenizers.

    Sentences are sorted by length and decoded in batches (through :func:`aiayn.generate`), then returned
    in input order. The output length is capped at ``max_len_a * source_length + max_len_b`` tokens. Empty
    (or whitespace-only) texts translate to "". Sources longer than the model's ``max_len`` are cut; the
    indices of those of the last call are in ``self.truncated``.
    """

    def __init__(self, model: EncoderDecoder, tokenizers: TokenizerPair, device: torch.device | str = "cpu",
                 beam_size: int = 1, alpha: float = 1.0, max_len_a: float = 1.5, max_len_b: int = 10,
                 int8: bool = False, bf16: bool = False, packed: bool = True,
                 draft: EncoderDecoder | None = None, draft_tokens: int = 4,
                 shortlist: Shortlist | None = None) -> None:
        """``int8``: dynamic int8 linear layers (CPU). ``bf16``: weights, activations and the KV cache in
        bfloat16 (half the memory traffic of float32; logits are scored in float32). ``packed``: on the CPU,
        decode with oneDNN-prepacked linear layers (:func:`aiayn.pack`; same results, about 2x faster).
        ``draft``: a smaller model with the same tokenizers; greedy decoding then runs speculatively (the
        same output), proposing ``draft_tokens`` per main-model pass; ``self.speculative`` counts the drafted
        and accepted tokens. ``shortlist``: each batch is decoded over its candidate target tokens only
        (:mod:`aiayn.inference.shortlist`; faster, the output may differ)."""
        if not isinstance(model, EncoderDecoder):
            raise ValueError(f"translation needs an encoder-decoder checkpoint, not {model.config.arch}")
        if beam_size < 1:
            raise ValueError(f"beam size: must be at least 1, got {beam_size}")
        if draft is not None and beam_size != 1:
            raise ValueError("--draft: speculative decoding is greedy; pass --beam-size 1")
        if shortlist is not None and (int8 or draft is not None):
            raise ValueError("--shortlist: not with --int8 or --draft; choose one")
        self.model = inference_copy(model, device, int8, bf16, packed)
        self.draft = None if draft is None else inference_copy(draft, device, int8, bf16, packed)
        self.speculative, self.draft_tokens = SpeculativeStats(), draft_tokens
        self.tokenizers, self.device = tokenizers, torch.device(device)
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.beam_size, self.alpha, self.shortlist = beam_size, alpha, shortlist
        self.truncated: list[int] = []

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", draft: str | Path | None = None,
                        shortlist: str | Path | None = None, **options) -> Translator:
        """``path`` is a checkpoint folder or a run folder (meaning its ``best/``); so is ``draft``, which must
        use the same tokenizers; ``shortlist`` is a file from ``aiayn shortlist``; options as in __init__."""
        folder = resolve_checkpoint(path)
        model, tokenizers = load_checkpoint(folder, "encoder-decoder")
        draft_model = None
        if draft is not None:
            draft_folder = resolve_checkpoint(draft)
            theirs = load_tokenizers(draft_folder)
            if (theirs.src.proto, theirs.tgt.proto) != (tokenizers.src.proto, tokenizers.tgt.proto):
                raise ValueError(f"--draft: {draft_folder} has other tokenizers than {folder}; train the draft "
                                 f"with --tokenizer pointing at the main run's tokenizer/ folder")
            draft_model = TransformerModel.load(draft_folder)
        table = None if shortlist is None else Shortlist.load(shortlist, model.config.target_vocab)
        return cls(model, tokenizers, device, draft=draft_model, shortlist=table, **options)

    def _generate(self, src: torch.Tensor, beam_size: int, alpha: float,
                  max_new_tokens: int | None) -> list[list[int]]:
        """Best hypothesis per row; the length limit is max_len_a * source length + max_len_b (capped)."""
        cfg = self.model.config
        candidates = None if self.shortlist is None else self.shortlist.candidates(src, cfg.pad_id, cfg.eos_id)
        return generate(self.model, src, "beam" if beam_size > 1 else "greedy", beam_size, max_new_tokens,
                        length_penalty=alpha, draft_model=self.draft, max_len_a=self.max_len_a,
                        max_len_b=self.max_len_b, draft_tokens=self.draft_tokens,
                        speculative_stats=self.speculative, candidates=candidates)

    def source_ids(self, text: str) -> list[int]:
        """The encoder's input for ``text`` (whitespace normalised, cut to max_len; [] for an empty text)."""
        return self.tokenizers.src.encode(" ".join(text.split()))[: self.model.config.max_len]

    @torch.no_grad()
    def translate(self, texts: list[str], batch_size: int = 64, *, beam_size: int | None = None,
                  alpha: float | None = None, max_new_tokens: int | None = None) -> list[str]:
        """Translate each text; empty input gives an empty list. Options default to the constructor's."""
        beam_size, alpha = beam_size or self.beam_size, self.alpha if alpha is None else alpha
        whole = self.tokenizers.src.encode_batch([" ".join(t.split()) for t in texts])
        limit = self.model.config.max_len
        self.truncated = [i for i, ids in enumerate(whole) if len(ids) > limit]
        encoded = [ids[:limit] for ids in whole]
        order = sorted((i for i in range(len(texts)) if encoded[i]), key=lambda i: len(encoded[i]))
        results: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            src = pad_batch([encoded[i] for i in chunk], self.model.config.pad_id).to(self.device)
            for i, ids in zip(chunk, self._generate(src, beam_size, alpha, max_new_tokens), strict=True):
                results[i] = self.tokenizers.tgt.decode(ids)
        return results
