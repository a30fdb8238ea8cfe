"""Which grammar library constrains aiayn's decoding (docs/serving.md, "Structured output"): llguidance,
xgrammar and outlines-core on one real tokenizer (SmolLM2's 49,152 byte-level BPE pieces, from an imported
checkpoint's tokenizer.json) and one JSON schema (nested objects, an array, an enum, numbers, required fields).

Measured per library: ``tokenizer_s`` (reading the vocabulary once per model), ``compile_s`` (one schema;
a server caches it), ``mask_us`` (the mean time of one step's allowed-token mask, over a walk of up to 100
steps where each step takes the allowed token that a seeded random score ranks first, the same scores for
every library) and ``steps``. JSON lines {"config", "metric", "value", "unit"}; libraries not installed are
left out (only llguidance is a dependency of aiayn; ``pip install xgrammar outlines-core`` for the others).

    python benchmarks/bench_grammar.py --tokenizer /path/to/imported/SmolLM2/tokenizer.json
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import torch
from common import emit as print_figure

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
    "role": {"enum": ["admin", "user", "guest"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4}},
    "required": ["name", "age", "role", "address"], "additionalProperties": False}
STEPS = 100


emit = partial(print_figure, digits=None)


def walk(allowed_of, advance, vocab: int, seed: int = 0) -> tuple[float, int]:
    """Mean seconds of ``allowed_of()`` ((V,) bool mask, None once finished) over the walk, and its steps."""
    gen, spent, steps = torch.Generator().manual_seed(seed), 0.0, 0
    for _ in range(STEPS):
        scores = torch.rand(vocab, generator=gen)
        start = time.perf_counter()
        allowed = allowed_of()
        spent += time.perf_counter() - start
        if allowed is None or not allowed.any():
            break
        advance(int(scores.masked_fill(~allowed, -1).argmax()))
        steps += 1
    return spent / max(steps, 1), steps


def llguidance_run(tokenizer_json: str, vocab: int) -> dict:
    import llguidance
    import llguidance.torch as lt

    start = time.perf_counter()
    tok = llguidance.LLTokenizer(tokenizer_json)
    made = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    matcher = llguidance.LLMatcher(tok, grammar)
    compiled = time.perf_counter()
    bitmask = lt.allocate_token_bitmask(1, tok.vocab_size)

    def allowed():
        if matcher.is_stopped():
            return None
        lt.fill_next_token_bitmask(matcher, bitmask, 0)
        return _unpack(bitmask[0], vocab)

    mask_s, steps = walk(allowed, lambda t: matcher.consume_token(t), vocab)
    return {"tokenizer_s": made - start, "compile_s": compiled - made, "mask_us": mask_s * 1e6, "steps": steps}


def xgrammar_run(tokenizer_path: str, vocab: int) -> dict:
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    start = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(PreTrainedTokenizerFast(tokenizer_file=tokenizer_path), vocab_size=vocab)
    compiler = xgr.GrammarCompiler(info)
    made = time.perf_counter()
    compiled_grammar = compiler.compile_json_schema(json.dumps(SCHEMA))
    matcher = xgr.GrammarMatcher(compiled_grammar)
    compiled = time.perf_counter()
    bitmask = xgr.allocate_token_bitmask(1, vocab)

    def allowed():
        if matcher.is_terminated():
            return None
        matcher.fill_next_token_bitmask(bitmask)
        return _unpack(bitmask[0], vocab)

    mask_s, steps = walk(allowed, lambda t: matcher.accept_token(t), vocab)
    return {"tokenizer_s": made - start, "compile_s": compiled - made, "mask_us": mask_s * 1e6, "steps": steps}


def outlines_run(tokenizer_json: str, vocab: int) -> dict:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema
    from tokenizers import Tokenizer

    start = time.perf_counter()
    tok = Tokenizer.from_str(tokenizer_json)
    eos = tok.token_to_id("<|endoftext|>") or 0
    pieces: dict[str, list[int]] = {}
    table = {c: b for b, c in _byte_alphabet().items()}
    for piece, i in tok.get_vocab().items():
        if i != eos:
            pieces.setdefault(bytes(table.get(c, 32) for c in piece).decode("latin-1"), []).append(i)
    vocabulary = Vocabulary(eos, pieces)
    made = time.perf_counter()
    guide = Guide(Index(build_regex_from_schema(json.dumps(SCHEMA)), vocabulary))
    compiled = time.perf_counter()

    words = torch.zeros((vocab + 31) // 32, dtype=torch.int32)

    def allowed():
        if guide.is_finished():
            return None
        guide.write_mask_into(words.data_ptr(), words.numel(), words.element_size())
        return _unpack(words, vocab)

    mask_s, steps = walk(allowed, guide.advance, vocab)
    return {"tokenizer_s": made - start, "compile_s": compiled - made, "mask_us": mask_s * 1e6, "steps": steps}


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte 0..255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def _unpack(words: torch.Tensor, vocab: int) -> torch.Tensor:
    """A bitmask of int32 words -> (vocab,) bool."""
    bits = (words[:, None] >> torch.arange(32, dtype=torch.int32)) & 1  # (W, 32)
    return bits.flatten()[:vocab].bool()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json (an imported model's)")
    args = ap.parse_args()
    text = Path(args.tokenizer).read_text(encoding="utf-8")
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_str(text).get_vocab_size(with_added_tokens=True)
    runs = {"llguidance": lambda: llguidance_run(text, vocab), "xgrammar": lambda: xgrammar_run(args.tokenizer, vocab),
            "outlines-core": lambda: outlines_run(text, vocab)}
    for name, run in runs.items():
        try:
            found = run()
        except ImportError as err:
            print_figure(name, "skipped", f"not installed: {err}", "text")
            continue
        for metric, value in found.items():
            emit(name, metric, round(value, 4) if isinstance(value, float) else value,
                 {"tokenizer_s": "s", "compile_s": "s", "mask_us": "us", "steps": "steps"}[metric])


if __name__ == "__main__":
    main()
