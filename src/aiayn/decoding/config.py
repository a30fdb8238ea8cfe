"""``DecodingConfig``: every decoding option, one name each from end to end: the dataclass field, the command-line
flag (``--length-penalty``), the HTTP request field, the library argument and the key of a checkpoint's
``generation.json`` (its decoding defaults, as Hugging Face's ``generation_config.json``). No torch here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.io.checkpoint import GENERATION
from aiayn.io.files import read_json

STRATEGIES = ("greedy", "beam", "sample", "mask-predict", "ctc")
PARALLEL = {"mask-predict": "cmlm", "ctc": "ctc"}  # the non-autoregressive strategies, and the task of each
# source_prefix: words, one space between, and at most one space after (T5's "translate English to German: ")
PREFIX = r"(?:[^\x00-\x20\x7f]+(?: [^\x00-\x20\x7f]+)* ?)?"
TEXT_MAX_NEW_TOKENS = 200  # a decoder-only model's default limit; a translation's follows its source
# An imported language model whose files say nothing of sampling decodes greedily, as Hugging Face's generate does
# then (do_sample false): the same answer every time; --temperature 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 is
# llama.cpp's sampling
SILENT_DEFAULTS = {"temperature": 0.0}
SAMPLING_FIELDS = ("strategy", "temperature", "top_k", "top_p", "min_p")
MAX_BIASES = 1024  # tokens a logit_bias may name


def _option(default, help: str, **extra):
    return field(default=default, metadata={"help": help, **extra})


def own_strategy(model) -> str | None:
    """The strategy a non-autoregressive model (a ``ModelConfig``) decodes with, and alone: mask-predict for a
    CMLM, ctc for a CTC model; None for the others."""
    return {"cmlm": "mask-predict", "ctc": "ctc"}.get(model.kind)


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode (section 6.1 for translation: beam 4, length penalty 0.6, length limit source + 50).

    Frozen and hashable: requests with equal configs decode in one batch. Invalid values are a ValueError
    naming the field (exit 2 on the command line, 422 over HTTP).
    """

    strategy: str | None = _option(None, "greedy | beam | sample | mask-predict | ctc (default: mask-predict "
                                         "for a CMLM, ctc's best path for a CTC model, beam when --beam-size > 1 "
                                         "for translation, sample when "
                                         "--temperature > 0 for text, else greedy)",
                                   choices=STRATEGIES)
    beam_size: int = _option(4, "beam size; 1 = greedy")
    length_penalty: float = _option(1.0, "beam search: GNMT length penalty alpha, scores / ((5 + length) / 6) "
                                         "** alpha; 0 = none")
    max_len_a: float = _option(1.5, "translation: at most a * source tokens + b new tokens (the paper: a 1, b 50)")
    max_len_b: int | None = _option(10, "translation: see --max-len-a (None: no limit relative to the source)")
    max_new_tokens: int | None = _option(None, f"at most this many new tokens (default: the translation limit "
                                               f"above; {TEXT_MAX_NEW_TOKENS} for text)")
    min_new_tokens: int = _option(0, "no end of sequence before this many new tokens")
    temperature: float = _option(1.0, "sampling temperature; 0 = greedy")
    top_k: int = _option(0, "sample from the k most likely tokens only; 0 = all")
    top_p: float = _option(1.0, "nucleus sampling: from the fewest tokens holding this probability; 1 = all")
    min_p: float = _option(0.0, "sample only tokens at least this fraction as likely as the likeliest; 0 = all")
    repetition_penalty: float = _option(1.0, "scores of tokens already in the prompt or the output: divided by "
                                             "this when positive, multiplied when negative; 1 = none")
    frequency_penalty: float = _option(0.0, "subtracted from a token's score once per time it was generated; "
                                            "0 = none")
    presence_penalty: float = _option(0.0, "subtracted from the score of every token generated at least once; "
                                           "0 = none")
    logit_bias: str | None = _option(None, "added to the scores of these tokens before the penalties, the grammar "
                                           "and the choice, as OpenAI's logit_bias: a JSON object of token ids "
                                           "to numbers in [-100, 100] (its text; the library also takes a dict), "
                                           "e.g. '{\"50256\": -100}'; greedy or sampled decoding")
    seed: int | None = _option(None, "sampling seed: the same seed gives the same output")
    iterations: int = _option(10, "mask-predict: parallel passes T (re-masking the least sure tokens); 1 = one "
                                  "pass")
    length_beam: int = _option(5, "mask-predict: target lengths tried per sentence l (the likeliest l)")
    num_return_sequences: int = _option(1, "sequences per input: the n best of the beam, or n samples",
                                        aliases=("--num-samples",))
    source_prefix: str = _option("", "translation: text put before every non-empty source, e.g. the target-language "
                                     "tag <2de> of a model trained with both_directions (its generation.json "
                                     "names the run's own direction)")
    json_schema: str | None = _option(None, "the output is JSON following this JSON schema (its text; the flag reads "
                                            "FILE); greedy or sampled decoding", file=True)
    grammar: str | None = _option(None, "the output follows this grammar (llguidance's Lark dialect, its text; the "
                                        "flag reads FILE); greedy or sampled decoding", file=True)

    def __post_init__(self) -> None:
        if isinstance(self.logit_bias, dict):  # the library's form: one canonical text, so equal biases batch
            object.__setattr__(self, "logit_bias", _bias_text(self.logit_bias))
        for f in dataclasses.fields(self):
            problem = _problem(f.name, getattr(self, f.name))
            if problem:
                raise ValueError(f"{f.name}: {problem}")
        if self.strategy == "beam" and self.num_return_sequences > self.beam_size:
            raise ValueError(f"num_return_sequences: at most beam_size={self.beam_size} for beam search")
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError("json_schema: give a JSON schema or a grammar, not both")

    def replace(self, **changes) -> DecodingConfig:
        """A copy with ``changes`` (field names), checked."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a decoding option; options: {', '.join(names())}")
        return dataclasses.replace(self, **changes)

    def resolve(self, model) -> DecodingConfig:
        """This decoding for ``model`` (a ``ModelConfig``), the one place a default is chosen: the strategy
        (the one named; else mask-predict for a CMLM, beam search for a translation model with ``beam_size`` > 1,
        sampling for a language model with ``temperature`` > 0, else greedy; sampling at temperature 0 is
        greedy) and a language model's length limit (``TEXT_MAX_NEW_TOKENS`` when none is given). What the model
        cannot run is a ValueError naming the field."""
        if model.arch == "encoder-only":
            raise ValueError("strategy: an encoder-only model does not generate text; use fill-mask or embed")
        default = (own_strategy(model) or ("beam" if model.arch == "encoder-decoder" and self.beam_size > 1
                   else "sample" if model.arch == "decoder-only" and self.temperature > 0 else "greedy"))
        strategy = self.strategy or default
        strategy = "greedy" if strategy == "sample" and self.temperature == 0 else strategy
        own = own_strategy(model)  # a non-autoregressive model decodes its own way, and nothing else does
        if own and strategy != own:
            raise ValueError(f"strategy: {strategy} cannot decode a {PARALLEL[own].upper()} checkpoint; use {own}")
        if not own and strategy in PARALLEL:
            raise ValueError(f"strategy: {strategy} needs a {PARALLEL[strategy].upper()} checkpoint (aiayn train "
                             f"--task {PARALLEL[strategy]})")
        if strategy == "greedy" and self.num_return_sequences != 1:
            raise ValueError("num_return_sequences: greedy decoding gives one sequence; use beam or sample")
        if strategy in PARALLEL and self.num_return_sequences != 1:
            raise ValueError(f"num_return_sequences: {strategy} gives one translation per input")
        if (self.json_schema or self.grammar) and strategy not in ("greedy", "sample"):
            raise ValueError(f"{'json_schema' if self.json_schema else 'grammar'}: constrained decoding is greedy "
                             f"or sampled, not {strategy}")
        biases = self.biases()
        if biases and strategy not in ("greedy", "sample"):
            raise ValueError(f"logit_bias: a bias is for greedy or sampled decoding, not {strategy}")
        if self.penalized and strategy not in ("greedy", "sample"):
            raise ValueError(f"repetition_penalty: the penalties are for greedy or sampled decoding, not {strategy}")
        outside = [i for i in biases if i >= model.target_vocab]
        if outside:
            raise ValueError(f"logit_bias: token id {outside[0]} is not in the model's vocabulary of "
                             f"{model.target_vocab}")
        limit = self.max_new_tokens
        if model.arch == "decoder-only" and limit is None:
            limit = TEXT_MAX_NEW_TOKENS
        return dataclasses.replace(self, strategy=strategy, max_new_tokens=limit)

    @property
    def penalized(self) -> bool:
        """Whether any penalty on seen tokens is set (repetition, frequency, presence)."""
        return (self.repetition_penalty, self.frequency_penalty, self.presence_penalty) != (1.0, 0.0, 0.0)

    def biases(self) -> dict[int, float]:
        """``logit_bias`` as token id -> bias ({} when none)."""
        return {int(k): float(v) for k, v in json.loads(self.logit_bias).items()} if self.logit_bias else {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def load(cls, folder: str | Path) -> DecodingConfig:
        """The decoding defaults of a checkpoint folder (``generation.json``; none: the defaults)."""
        path = Path(folder) / GENERATION
        if not path.is_file():
            return cls()
        options = {k: v for k, v in read_json(path).items() if k != "draft"}  # the draft: inference/draft.py's
        try:
            return cls().replace(**options)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def changes(self) -> dict:
        """The fields that differ from the defaults (what ``generation.json`` records)."""
        return {k: v for k, v in self.to_dict().items() if v != _default(k)}


def imported_defaults(model, found: dict | None) -> dict | None:
    """The decoding defaults an imported model (its ``ModelConfig``) is written with: the options its own files
    give (``found``); for a language model whose files say nothing of sampling, greedy decoding
    (``SILENT_DEFAULTS``) with them."""
    found = dict(found or {})
    if model.arch == "decoder-only" and not any(name in found for name in SAMPLING_FIELDS):
        found.update(SILENT_DEFAULTS)
    return found or None


def names() -> list[str]:
    return [f.name for f in dataclasses.fields(DecodingConfig)]


def _default(name: str):
    return next(f.default for f in dataclasses.fields(DecodingConfig) if f.name == name)


_RULES = {  # field -> (test, what it must be)
    "strategy": (lambda v: v is None or v in STRATEGIES, f"one of {', '.join(STRATEGIES)}"),
    "beam_size": (lambda v: _int(v) and v >= 1, "a whole number >= 1"),
    "length_penalty": (lambda v: _real(v) and 0 <= v <= 10, "a number in [0, 10]"),
    "max_len_a": (lambda v: _real(v) and 0 <= v <= 100, "a number in [0, 100]"),
    "max_len_b": (lambda v: v is None or (_int(v) and 0 <= v <= 100_000), "a whole number in [0, 100000]"),
    "max_new_tokens": (lambda v: v is None or (_int(v) and v >= 1), "a whole number >= 1"),
    "min_new_tokens": (lambda v: _int(v) and v >= 0, "a whole number >= 0"),
    "temperature": (lambda v: _real(v) and 0 <= v <= 100, "a number in [0, 100] (0 = greedy)"),
    "top_k": (lambda v: _int(v) and v >= 0, "a whole number >= 0 (0 = all tokens)"),
    "top_p": (lambda v: _real(v) and 0 < v <= 1, "a number in (0, 1]"),
    "min_p": (lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "repetition_penalty": (lambda v: _real(v) and 0 < v <= 10, "a number in (0, 10]"),
    "frequency_penalty": (lambda v: _real(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "presence_penalty": (lambda v: _real(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "logit_bias": (lambda v: v is None or _bias_ok(v), f"a JSON object of at most {MAX_BIASES} token ids (whole "
                   "numbers >= 0, as text) to numbers in [-100, 100]"),
    "seed": (lambda v: v is None or (_int(v) and 0 <= v < 2**53), "a whole number in [0, 2^53) (exact in JSON)"),
    "num_return_sequences": (lambda v: _int(v) and v >= 1, "a whole number >= 1"),
    "iterations": (lambda v: _int(v) and 1 <= v <= 100, "a whole number in 1..100"),
    "length_beam": (lambda v: _int(v) and 1 <= v <= 100, "a whole number in 1..100"),
    "source_prefix": (lambda v: isinstance(v, str) and len(v) <= 64 and re.fullmatch(PREFIX, v) is not None,
                      "text of at most 64 characters: words of visible characters, one space between them "
                      "(and at most one after)"),
    "json_schema": (lambda v: v is None or _schema_text(v), "the text of a JSON object (a JSON schema)"),
    "grammar": (lambda v: v is None or (isinstance(v, str) and v.strip() != ""), "the text of a grammar"),
}


# The numeric rules above as bounds a request schema can state (pydantic's ge / le / gt; the HTTP routes' fields
# carry them, so /openapi.json says what the checks refuse; tests/decoding/test_config.py holds them to _RULES).
BOUNDS = {"beam_size": {"ge": 1}, "length_penalty": {"ge": 0, "le": 10}, "max_len_a": {"ge": 0, "le": 100},
          "max_len_b": {"ge": 0, "le": 100_000},
          "max_new_tokens": {"ge": 1}, "min_new_tokens": {"ge": 0}, "temperature": {"ge": 0, "le": 100},
          "top_k": {"ge": 0},
          "top_p": {"gt": 0, "le": 1}, "min_p": {"ge": 0, "le": 1}, "repetition_penalty": {"gt": 0, "le": 10},
          "frequency_penalty": {"ge": -2, "le": 2}, "presence_penalty": {"ge": -2, "le": 2},
          "seed": {"ge": 0, "le": 2**53 - 1}, "num_return_sequences": {"ge": 1},
          "iterations": {"ge": 1, "le": 100}, "length_beam": {"ge": 1, "le": 100},
          "source_prefix": {"max_length": 64, "pattern": "^" + PREFIX + "$"}, "grammar": {"min_length": 1}}


def _bias_text(biases: dict) -> str:
    """A dict of token ids to biases as ``logit_bias``'s canonical text (ids in order); what cannot be one is kept
    as its repr, for the field's check to refuse by name."""
    try:
        return json.dumps({str(int(k)): float(v) for k, v in sorted(biases.items(), key=lambda kv: int(kv[0]))})
    except (TypeError, ValueError):
        return repr(biases)


def _bias_ok(v) -> bool:
    if not isinstance(v, str):
        return False
    try:
        found = json.loads(v)
    except ValueError:
        return False
    return isinstance(found, dict) and len(found) <= MAX_BIASES and all(
        re.fullmatch(r"\d{1,9}", k) and _real(b) and -100 <= b <= 100 for k, b in found.items())


def _schema_text(v) -> bool:
    if not isinstance(v, str):
        return False
    try:
        return isinstance(json.loads(v), dict)
    except ValueError:
        return False


def _problem(name: str, value) -> str | None:
    test, must = _RULES[name]
    return None if test(value) else f"must be {must}, got {value!r}"


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
