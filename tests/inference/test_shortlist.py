"""The lexical shortlist: counted from a corpus, saved safely, and decoding over its candidates only is
decoding over the full vocabulary with every other token at -inf."""

import copy
import json
import random

import pytest
import torch

from aiayn import generate, pack, quantize
from aiayn.cli import main
from aiayn.data.datasets import load_splits, synthetic_pairs
from aiayn.decoding import beam_search
from aiayn.decoding.engine import Engine, run
from aiayn.decoding.greedy import TokenRows
from aiayn.inference.shortlist import Shortlist, build_shortlist
from aiayn.inference.translator import Translator
from aiayn.model.packed import output_rows

from conftest import random_ids

FILLER = 5  # a target token of every sentence: the most frequent, and associated with no source token


def tokens(rows: list[list[int]]) -> set[int]:
    return {tok for row in rows for tok in row}


def dictionary_corpus(pairs: int = 300, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Source tokens 10..29 each translate to token + 20; the target's words come shuffled, plus FILLER."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(pairs):
        src = rng.sample(range(10, 30), rng.randint(2, 6))
        tgt = [s + 20 for s in src] + [FILLER]
        rng.shuffle(tgt)
        corpus.append((src, tgt))
    return corpus


def test_each_source_token_is_listed_with_its_translation_first():
    shortlist = build_shortlist(dictionary_corpus(), src_vocab=60, tgt_vocab=60, frequent=1, per_token=3)
    assert shortlist.frequent.tolist() == [FILLER]
    assert shortlist.table[10:30, 0].tolist() == list(range(30, 50))  # Dice ranks the translation first
    assert (shortlist.table[:10] == -1).all() and (shortlist.table[30:] == -1).all()  # never seen: no candidates
    assert shortlist.table.shape == (60, 3)


def test_a_batchs_candidates_are_the_frequent_its_sources_lists_and_eos():
    shortlist = build_shortlist(dictionary_corpus(), 60, 60, frequent=1, per_token=1)
    src = torch.tensor([[12, 15, 0, 0], [12, 20, 21, 0]])  # 0 = padding
    assert shortlist.candidates(src, pad_id=0, eos_id=2).tolist() == [2, FILLER, 32, 35, 40, 41]
    with pytest.raises(ValueError, match="source id 70 is outside its table of 60"):
        shortlist.candidates(torch.tensor([[70]]), pad_id=0, eos_id=2)


def test_saved_and_loaded_without_pickle_and_bad_files_are_named(tmp_path):
    shortlist = build_shortlist(dictionary_corpus(), 60, 60, frequent=4, per_token=2)
    shortlist.save(tmp_path / "s.safetensors")
    again = Shortlist.load(tmp_path / "s.safetensors", target_vocab=60)
    assert torch.equal(again.frequent, shortlist.frequent) and torch.equal(again.table, shortlist.table)
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]  # no temp file left behind
    with pytest.raises(ValueError, match="target id 49 is outside the model's vocabulary of 40"):
        Shortlist.load(tmp_path / "s.safetensors", target_vocab=40)
    (tmp_path / "bad.safetensors").write_bytes(b"\x80\x04 a pickle, say")
    with pytest.raises(ValueError, match=r"bad\.safetensors: not a shortlist file"):
        Shortlist.load(tmp_path / "bad.safetensors")
    with pytest.raises(FileNotFoundError, match=r"missing\.safetensors: no such shortlist file"):
        Shortlist.load(tmp_path / "missing.safetensors")


def test_greedy_over_candidates_is_greedy_with_every_other_token_at_minus_inf(model):
    src = random_ids(5, 6, vocab=30)
    candidates = torch.tensor([2, 4, 6, 9, 11, 17, 20, 23, 29])  # EOS (2) and a few others
    allowed = torch.zeros(30, dtype=torch.bool)
    allowed[candidates] = True
    cfg = model.config
    masked = TokenRows(torch.full((5,), 10), lambda s: s.masked_fill(~allowed, float("-inf")).argmax(dim=-1),
                       cfg.eos_id, cfg.pad_id)
    reference = run(model, masked, src).results()
    assert generate(model, src, "greedy", max_new_tokens=10, candidates=candidates) == reference
    assert any(len(row) > 0 for row in reference)
    assert tokens(reference) <= set(candidates.tolist())


def test_candidates_holding_the_full_output_change_nothing(model):
    src = random_ids(6, 7, vocab=30)
    full = generate(model, src, "greedy", max_new_tokens=12)
    held = torch.tensor(sorted(tokens(full) | {2}))
    assert generate(model, src, "greedy", max_new_tokens=12, candidates=held) == full
    everything = torch.arange(30)
    assert (generate(model, src, "beam", beam_size=3, max_new_tokens=12, candidates=everything)
            == generate(model, src, "beam", beam_size=3, max_new_tokens=12))
    restricted = generate(model, src, "beam", beam_size=3, max_new_tokens=12, candidates=held[:4])
    assert tokens(restricted) <= set(held[:4].tolist())


class MaskedOutput:
    """The model with every token outside ``allowed`` scored -inf over the full vocabulary: the reference."""

    def __init__(self, model, allowed):
        self.model, self.allowed, self.config = model, allowed, model.config

    def start(self, *args):
        return self.model.start(*args)

    def step(self, tokens, state, last=False):
        return self.model.step(tokens, state, last).masked_fill(~self.allowed, float("-inf"))  # (B, t'|1, V)


def test_beam_over_candidate_columns_is_beam_over_the_vocabulary_with_the_others_at_minus_inf(model):
    src = random_ids(4, 6, vocab=30)
    candidates = torch.tensor([2, 3, 6, 9, 11, 17, 20, 23, 29])
    allowed = torch.zeros(30, dtype=torch.bool)
    allowed[candidates] = True
    ours = beam_search(model, src, beam_size=3, max_new_tokens=10, min_new_tokens=2, candidates=candidates)
    reference = beam_search(MaskedOutput(model, allowed), src, beam_size=3, max_new_tokens=10, min_new_tokens=2)
    assert [[h.tokens for h in n_best] for n_best in ours] == [[h.tokens for h in n_best] for n_best in reference]
    for mine, theirs in zip(ours, reference, strict=True):
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-4)
    assert any(h.tokens for n_best in ours for h in n_best)
    only_eos = beam_search(model, src, beam_size=3, max_new_tokens=10, candidates=torch.tensor([2]))  # C < 2
    assert [[h.tokens for h in n_best] for n_best in only_eos] == [[[]]] * 4


def test_the_engine_scores_candidate_columns_forbids_by_column_and_maps_columns_back(model):
    cfg = model.config
    candidates = torch.tensor([cfg.pad_id, cfg.bos_id, cfg.eos_id, 7, 12])  # a list holding BOS and PAD too
    seen = []
    rows = TokenRows(torch.tensor([1, 1]), lambda s: seen.append(s.clone()) or s.argmax(dim=-1), cfg.eos_id, cfg.pad_id)
    engine = Engine(model, candidates=candidates)
    engine.admit(rows, random_ids(2, 5, vocab=30))
    engine.run()
    (scores,) = seen  # (2, 5): one column per candidate, PAD and BOS forbidden
    assert scores.shape == (2, 5) and torch.isinf(scores[:, :2]).all() and torch.isfinite(scores[:, 2:]).all()
    kept = engine.columns.forbid(scores.clone(), no_eos=True)
    assert torch.isinf(kept[:, :3]).all() and torch.isfinite(kept[:, 3:]).all()
    assert engine.columns.token_ids(torch.tensor([4, 3, 2])).tolist() == [12, 7, cfg.eos_id]
    assert {t for row in rows.results() for t in row} <= {7, 12}


def test_the_rows_of_a_packed_projection_and_int8_is_a_clear_error(model):
    plain = copy.deepcopy(model).float()
    ids = torch.tensor([3, 7, 8, 21])
    hidden = torch.randn(2, 3, plain.config.d_model)
    packed_rows = output_rows(pack(plain).output, ids)
    with torch.no_grad():
        torch.testing.assert_close(packed_rows(hidden), plain.output(hidden)[..., ids], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(output_rows(plain.output, ids)(hidden), plain.output(hidden)[..., ids])
    with pytest.raises(ValueError, match="cannot be cut out"):
        output_rows(quantize(plain).output, ids)


@pytest.fixture(scope="module")
def reverse_tsv(tmp_path_factory):
    pairs = synthetic_pairs("reverse", 200, 0)
    path = tmp_path_factory.mktemp("shortlist-data") / "train.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in zip(pairs.sources, pairs.targets, strict=True)))
    return path


def test_shortlist_command_then_translate_with_it(trained_run, reverse_tsv, tmp_path, capsys):
    out = tmp_path / "reverse.safetensors"
    assert main(["shortlist", "--checkpoint", str(trained_run), "--data", str(reverse_tsv), "--output", str(out),
                 "--frequent", "20", "--per-token", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == len(load_splits(str(reverse_tsv)).train)
    sources = synthetic_pairs("reverse", 20, 7).sources
    full = Translator.from_checkpoint(trained_run).translate(sources)
    short = Translator.from_checkpoint(trained_run, shortlist=out)
    assert sum(a == b for a, b in zip(short.translate(sources), full, strict=True)) >= 15  # the words it needs
    assert short.translate(sources, beam_size=2)  # beam search takes it too
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sources[:3]) + "\n")
    assert main(["translate", "--checkpoint", str(trained_run), "--input", str(source), "--shortlist", str(out),
                 "--beam-size", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == short.translate(sources[:3], beam_size=1)


def test_shortlist_mistakes_are_one_line_errors(trained_run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("a b c\n")
    assert main(["translate", "--checkpoint", str(trained_run), "--input", str(source),
                 "--shortlist", str(tmp_path / "none.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "none.safetensors: no such shortlist file" in err and "Traceback" not in err
    build_shortlist(dictionary_corpus(), 300, 300).save(tmp_path / "s.safetensors")
    assert main(["translate", "--checkpoint", str(trained_run), "--input", str(source), "--int8",
                 "--shortlist", str(tmp_path / "s.safetensors")]) == 2
    assert "--shortlist: not with --int8, --int4 or --draft" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(trained_run), "--input", str(source), "--draft", str(trained_run),
                 "--beam-size", "1", "--shortlist", str(tmp_path / "s.safetensors")]) == 2
    assert "--shortlist: not with --int8, --int4 or --draft" in capsys.readouterr().err
    assert main(["shortlist", "--checkpoint", str(trained_run), "--data", "reverse", "--output",
                 str(tmp_path / "s.safetensors"), "--per-token", "0"]) == 2
    assert "--per-token" in capsys.readouterr().err
