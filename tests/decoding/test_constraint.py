"""Constrained decoding's pieces (``decoding/constraint.py``) on a real byte-level vocabulary: the mask a grammar
allows equals the tokens found by brute force (each token's text against the grammar's strings), and as tokens
are taken it keeps within what can still follow; a token it forbids is refused by name; the grammar ends the row;
masks pad and cut to the scores' width; grammars compile once and the cache is bounded; a schema gets json.dumps'
separators; SentencePiece pieces become their bytes."""

import json

import pytest
import torch

from aiayn.decoding.constraint import JSON_STYLE, Grammars, _piece_bytes, allowed, styled
from aiayn.inference.generator import TextGenerator

from conftest import chat_checkpoint

WORDS = ("Paris", "Tokyo")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path_factory.mktemp("grammar") / "ckpt"))
    return generator.tokenizer, generator.model.config.end_ids


def texts(tokenizer) -> list[str]:
    return [tokenizer.decode([i]) for i in range(len(tokenizer))]


def test_the_mask_is_every_token_that_starts_a_word_of_the_grammar_and_moves_with_each_token(tokenizer):
    tok, end_ids = tokenizer
    grammar = Grammars(tok, end_ids).compile(grammar=f'start: "{WORDS[0]}" | "{WORDS[1]}"')
    row, pieces = grammar.row(), texts(tok)
    expected = [bool(p) and any(w.startswith(p) for w in WORDS) for p in pieces]
    mask = allowed([row], len(pieces))[0]
    assert mask.tolist() == expected and sum(expected) >= 2  # the brute-force answer
    written = ""
    while not row.stopped:  # later, within a word, llguidance may keep to fewer splits of it: never to others
        mask = allowed([row], len(pieces))[0]
        rest = [w[len(written):] for w in WORDS if w.startswith(written)]
        fits = [bool(p) and any(r.startswith(p) for r in rest) for p in pieces]
        assert mask.any() and not (mask & ~torch.tensor(fits)).any(), written
        token = max(i for i in range(len(pieces)) if mask[i])  # any allowed token will do: the last one
        row.take(token)
        written += pieces[token]
    assert written in WORDS
    refused = grammar.row()
    wrong = pieces.index(next(p for p in pieces if p and not any(w.startswith(p) for w in WORDS)))
    with pytest.raises(RuntimeError, match=f"grammar: token {wrong} was not allowed"):
        refused.take(wrong)


def test_rows_get_their_own_masks_padded_or_cut_to_the_scores_width(tokenizer):
    tok, end_ids = tokenizer
    grammars = Grammars(tok, end_ids)
    a, b = grammars.compile(grammar='start: "Paris"').row(), grammars.compile(grammar='start: "Tokyo"').row()
    vocab = len(tok)
    masks = allowed([a, b], vocab + 40)  # (2, vocab + 40): columns past the vocabulary (a padding row) never
    assert masks.shape == (2, vocab + 40) and not masks[:, vocab:].any()
    assert not (masks[0, :vocab] & masks[1, :vocab]).any()  # "P..." and "T..." share no first token
    assert torch.equal(allowed([a, b], 10), masks[:, :10])


def test_grammars_compile_once_keep_a_bounded_cache_and_name_what_fails(tokenizer):
    tok, end_ids = tokenizer
    grammars = Grammars(tok, end_ids, cache_size=2)
    schema = json.dumps({"type": "object", "properties": {"city": {"enum": list(WORDS)}}, "required": ["city"]})
    first = grammars.compile(json_schema=schema)
    assert grammars.compile(json_schema=schema) is first
    grammars.compile(grammar='start: "a"')
    grammars.compile(grammar='start: "b"')  # the third: the oldest (the schema) goes
    assert grammars.compile(json_schema=schema) is not first and len(grammars._cache) == 2
    with pytest.raises(ValueError, match="json_schema: cannot compile it"):
        grammars.compile(json_schema='{"type": "no-such-type"}')
    with pytest.raises(ValueError, match="grammar: cannot compile it"):
        grammars.compile(grammar="start: no_such_rule")


def test_a_schema_row_writes_json_as_json_dumps_does(tokenizer):
    tok, end_ids = tokenizer
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris"]}, "days": {"const": 3}},
              "required": ["city", "days"], "additionalProperties": False}
    row, pieces = Grammars(tok, end_ids).compile(json_schema=json.dumps(schema)).row(), texts(tok)
    written = ""
    while not row.stopped:
        mask = allowed([row], len(pieces))[0]
        choices = [i for i in range(len(pieces)) if mask[i] and i not in end_ids]
        if not choices:
            break
        token = max(choices, key=lambda i: len(pieces[i]))  # the longest allowed piece: no free choice is left
        row.take(token)
        written += pieces[token]
    assert written == json.dumps({"city": "Paris", "days": 3})
    assert styled(schema)["x-guidance"] == JSON_STYLE and styled({"x-guidance": {}}) == {"x-guidance": {}}


def test_sentencepiece_pieces_are_their_bytes():
    assert _piece_bytes("<0x41>") == b"A" and _piece_bytes("<0x0A>") == b"\n"
    assert _piece_bytes("\u2581the") == b" the" and _piece_bytes("caf\u00e9") == "café".encode()
    assert _piece_bytes("<s>") == b"" and _piece_bytes("<unk>") == b""


def test_a_grammar_holds_against_a_logit_bias_which_still_chooses_among_what_it_allows(tmp_path):
    """The bias moves the scores before the grammar's mask: a token the grammar forbids stays out however it is
    pushed, and of two words it allows, the one whose first token is pushed is written."""
    from aiayn import generate

    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt"))
    tok, model = generator.tokenizer, generator.model
    grammars = Grammars(tok, model.config.end_ids)
    prompt = torch.tensor([tok.encode("Zwei Hunde spielen.")])
    forbidden = tok.encode(" dogs")[0]
    for word in WORDS:
        first = tok.encode(word)[0]
        out = generate(model, prompt, "greedy", max_new_tokens=8, grammars=grammars,
                       grammar=f'start: "{WORDS[0]}" | "{WORDS[1]}"', logit_bias={first: 100, forbidden: 100})[0]
        assert tok.decode(out) == word
