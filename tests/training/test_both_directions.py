"""One model on both directions (``both_directions``): tagged pairs each way, tags as single tokens, the recipe's
checks, the run's source prefix, and a tiny run whose tag alone decides the output."""

import json
import random
import subprocess
import sys

import pytest

from aiayn.data.corpus import Parallel, both_directions, with_prefix
from aiayn.decoding.config import DecodingConfig
from aiayn.inference.translator import Translator
from aiayn.tokenizers import SentencePiecePair
from aiayn.training.build import load_data
from aiayn.training.config import TrainConfig
from aiayn.training.trainer import Trainer


def test_pairs_go_each_way_led_by_their_targets_tag():
    pairs = both_directions(Parallel(["ein Hund", "zwei"], ["a dog", "two"]), "de", "en")
    assert pairs.sources == ["<2en> ein Hund", "<2en> zwei", "<2de> a dog", "<2de> two"]
    assert pairs.targets == ["a dog", "two", "ein Hund", "zwei"]
    assert with_prefix("", "text") == "text" and with_prefix("<2de>", " ") == " "


def test_the_tags_are_single_tokens_wherever_they_stand():
    texts = [f"ein Hund läuft {i} mal <2en> über die Wiese" for i in range(200)] + ["a dog runs"] * 50
    pair = SentencePiecePair.train(texts, [], 300, True, symbols=["<2de>", "<2en>"])
    tok = pair.src
    de, en = tok.sp.piece_to_id("<2de>"), tok.sp.piece_to_id("<2en>")
    assert len({de, en, tok.sp.unk_id()}) == 3
    assert tok.encode("<2de> ein Hund").count(de) == 1 and en not in tok.encode("<2de> ein Hund")
    assert tok.encode("x <2en> y").count(en) == 1  # never split, even inside a text


def test_the_recipe_checks_what_both_directions_needs():
    base = {"data": "copy", "src_lang": "de", "tgt_lang": "en", "both_directions": True}
    for change in ({"task": "lm"}, {"joint_vocab": False}, {"tokenizer": "runs/x/tokenizer"}, {"tgt_lang": "de"},
                   {"src_lang": None}, {"init_from": "runs/x"}):
        with pytest.raises(ValueError, match="both_directions: needs"):
            TrainConfig(**{**base, **change})
    assert TrainConfig(**base).generation() == {"source_prefix": "<2en>"}
    mine = TrainConfig(**base, decoding={"source_prefix": "<2de>", "beam_size": 5}).generation()
    assert mine == {"beam_size": 5, "source_prefix": "<2de>"}
    assert TrainConfig(data="copy").generation() is None


def test_the_source_prefix_is_checked():
    assert DecodingConfig(source_prefix="<2de>").source_prefix == "<2de>"
    assert DecodingConfig(source_prefix="translate English to German: ").source_prefix.endswith(": ")
    for bad in ("a\nb", " <2de>", "x" * 65, "a  b", "a: \t", "ab  ", 3):
        with pytest.raises(ValueError, match="source_prefix: must be text of at most 64 characters"):
            DecodingConfig(source_prefix=bad)


def _rotation_data(tmp_path, count: int) -> str:
    """``w1 .. wn`` -> ``w2 .. wn w1``: the way back is the other rotation, from the same alphabet, so only the
    tag tells a model which way to turn."""
    rng = random.Random(0)
    lines = []
    for _ in range(count):
        words = [rng.choice("abcdefgh") for _ in range(rng.randint(4, 6))]
        lines.append(f"{' '.join(words)}\t{' '.join(words[1:] + words[:1])}")
    (tmp_path / "rot.tsv").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "rot.tsv")


def test_load_data_tags_training_both_ways_and_validation_one_way(tmp_path):
    cfg = TrainConfig(data=_rotation_data(tmp_path, 300), src_lang="xx", tgt_lang="yy", both_directions=True)
    splits, plain = load_data(cfg), load_data(TrainConfig(data=cfg.data))
    assert len(splits.train) == 2 * len(plain.train) and splits.train.targets[len(plain.train):] == plain.train.sources
    assert splits.valid.sources == [f"<2yy> {s}" for s in plain.valid.sources]
    assert splits.valid.targets == plain.valid.targets


@pytest.mark.long  # a learning bar that needs 400 steps of training: 22 s
def test_a_tiny_run_turns_each_way_as_its_tag_asks(tmp_path):
    cfg = TrainConfig(data=_rotation_data(tmp_path, 3000), src_lang="xx", tgt_lang="yy", both_directions=True,
                      preset="tiny", output=str(tmp_path / "run"), vocab_size=300, max_tokens=1024, max_steps=400,
                      eval_every=400, schedule="inverse_sqrt", lr=3e-3, warmup=40, keep_last=0, log_every=100,
                      bleu_sentences=50, model={"dropout": 0.0}, device="cpu")
    Trainer(cfg).train()
    assert json.loads((tmp_path / "run" / "best" / "generation.json").read_text()) == {"source_prefix": "<2yy>"}
    translator = Translator.from_checkpoint(tmp_path / "run", beam_size=1)
    rng = random.Random(1)
    tests = [[rng.choice("abcdefgh") for _ in range(5)] for _ in range(40)]
    texts = [" ".join(w) for w in tests]
    forward = translator.translate(texts)
    back = translator.translate(texts, source_prefix="<2xx>")
    # the two rotations of a text differ unless its words are all one letter, so a model blind to the tag gets
    # at most about 40 right over both ways together; 30 each way needs the tag (35-40 seen, by thread count)
    assert sum(f == " ".join(w[1:] + w[:1]) for f, w in zip(forward, tests, strict=True)) >= 30, forward[:5]
    assert sum(b == " ".join(w[-1:] + w[:-1]) for b, w in zip(back, tests, strict=True)) >= 30, back[:5]
    assert translator.translate(["", "  "]) == ["", ""]
    command = [sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(tmp_path / "run"), "--beam-size", "1",
               "--source-prefix", "<2xx>"]
    out = subprocess.run(command, input="\n".join(texts[:5]) + "\n", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines() == back[:5], out.stderr[-1000:]
