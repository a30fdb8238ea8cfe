"""Constrained decoding: a row's tokens follow a grammar, a JSON schema or a Lark grammar, through llguidance
(chosen over xgrammar and outlines-core by ``benchmarks/bench_grammar.py``: docs/serving.md, "Structured output").

Each step, a constrained row's scores outside the tokens its grammar allows next become -inf (a token mask per
row, so constrained and free rows share a batch); the token chosen is then fed to the row's matcher. The row ends
("stop") when the grammar can take nothing more, or at an end id where the grammar may end. A grammar is compiled
once per tokenizer and text (:class:`Grammars` caches it); each row gets its own :class:`RowConstraint`.
"""

from __future__ import annotations

import json
from collections import OrderedDict

import torch
from torch import Tensor

_BITS = torch.arange(32, dtype=torch.int32)
# How constrained JSON is written unless a schema says otherwise (its "x-guidance"): one space after ":" and ","
# as json.dumps writes it, and no other whitespace (free whitespace lets a model pad forever).
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def styled(schema: dict) -> dict:
    """``schema`` with :data:`JSON_STYLE` where it sets no ``x-guidance`` of its own."""
    return schema if "x-guidance" in schema else {**schema, "x-guidance": JSON_STYLE}


class Grammar:
    """A compiled grammar (llguidance's grammar text, validated against one tokenizer)."""

    def __init__(self, tokenizer, spec: str) -> None:
        self.tokenizer, self.spec = tokenizer, spec

    def row(self) -> RowConstraint:
        """A fresh matcher for one row."""
        return RowConstraint(self)


class RowConstraint:
    """One row's place in its grammar: which tokens may come next, and what came."""

    def __init__(self, grammar: Grammar) -> None:
        import llguidance

        self.matcher = llguidance.LLMatcher(grammar.tokenizer, grammar.spec)
        self.vocab = grammar.tokenizer.vocab_size

    @property
    def stopped(self) -> bool:
        """Whether the grammar can take nothing more (the row is complete)."""
        return self.matcher.is_stopped()

    def take(self, token: int) -> None:
        """Feed the token chosen (an end id where the grammar may end stops it)."""
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"grammar: token {token} was not allowed ({self.matcher.get_error()})")


def allowed(rows: list[RowConstraint], width: int) -> Tensor:
    """(n, width) bool: for each row, the tokens its grammar allows next (columns past its tokenizer's vocabulary
    never). The n masks are computed together, in parallel, by llguidance's executor."""
    import llguidance.torch as lt

    words = torch.zeros(len(rows), (max(r.vocab for r in rows) + 31) // 32, dtype=torch.int32)  # (n, W) bitmask
    lt.fill_next_token_bitmask_par(_executor(), [(r.matcher, i) for i, r in enumerate(rows)], words)
    bits = ((words[:, :, None] >> _BITS) & 1).flatten(1).bool()  # (n, 32 * W)
    if bits.size(1) >= width:
        return bits[:, :width]
    return torch.cat([bits, bits.new_zeros(len(rows), width - bits.size(1))], dim=1)


_EXECUTOR = []


def _executor():
    """llguidance's thread pool for masks, made once."""
    if not _EXECUTOR:
        import llguidance

        _EXECUTOR.append(llguidance.LLExecutor())
    return _EXECUTOR[0]


class Grammars:
    """The grammar compiler of one tokenizer (its vocabulary read once, lazily): :meth:`compile` caches the
    last ``cache_size`` grammars. ``end_ids``: the model's end ids (where the grammar may end, they end the row)."""

    def __init__(self, tokenizer, end_ids: tuple[int, ...], cache_size: int = 64) -> None:
        self.source, self.end_ids, self.cache_size = tokenizer, list(end_ids), cache_size
        self._tokenizer = None
        self._cache: OrderedDict[tuple, Grammar] = OrderedDict()

    def tokenizer(self):
        """llguidance's view of the vocabulary: a tokenizer.json as it is, else each id's bytes."""
        if self._tokenizer is None:
            import llguidance

            hf = getattr(self.source, "tok", None)
            if hf is not None and hasattr(hf, "to_str"):
                self._tokenizer = llguidance.LLTokenizer(hf.to_str(), eos_token=self.end_ids)
            else:
                self._tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Pieces(self.source,
                                                                                             self.end_ids)))
        return self._tokenizer

    def compile(self, json_schema: str | None = None, grammar: str | None = None) -> Grammar:
        """The grammar of a JSON schema or a Lark grammar (their text), compiled once; one it cannot compile is a
        ValueError naming the field and the problem."""
        import llguidance

        key = (json_schema, grammar)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        name = "json_schema" if json_schema is not None else "grammar"
        try:
            spec = (llguidance.LLMatcher.grammar_from_json_schema(styled(json.loads(json_schema)))
                    if json_schema is not None else llguidance.LLMatcher.grammar_from_lark(grammar))
            problem = llguidance.LLMatcher.validate_grammar(spec, self.tokenizer())
        except (ValueError, TypeError) as err:
            problem = str(err)
        if problem:
            raise ValueError(f"{name}: cannot compile it: {' '.join(problem.split())[:300]}")
        self._cache[key] = compiled = Grammar(self.tokenizer(), spec)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return compiled

    def for_decoding(self, decoding) -> Grammar | None:
        """The grammar a ``DecodingConfig`` asks for (its ``json_schema`` or ``grammar``), or None."""
        if decoding.json_schema is None and decoding.grammar is None:
            return None
        return self.compile(decoding.json_schema, decoding.grammar)


class _Pieces:
    """What llguidance reads of a tokenizer without a tokenizer.json (SentencePiece): each id's bytes."""

    def __init__(self, tokenizer, end_ids: list[int]) -> None:
        self.tokenizer, self.eos_token_id, self.bos_token_id = tokenizer, end_ids[0], None
        self.tokens = [_piece_bytes(p) for p in tokenizer.pieces(list(range(len(tokenizer))))]
        self.special_token_ids = [i for i, p in enumerate(tokenizer.pieces(list(range(len(tokenizer)))))
                                  if p.startswith("<") and p.endswith(">") and not p.startswith("<0x")]

    def __call__(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)


def _piece_bytes(piece: str) -> bytes:
    """A SentencePiece piece's bytes: ``<0xNN>`` is one byte, ``▁`` a space, control pieces nothing."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    if piece.startswith("<") and piece.endswith(">"):
        return b""
    return piece.replace("\u2581", " ").encode("utf-8")
