"""``aiayn preprocess`` and the token shards: what is written reads back as the tokenizer encodes it, the
batch plan covers every pair once per epoch, an interrupted run keeps its finished shards, and a killed
training run on shards resumes to the same weights."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.data.corpus import Parallel, clean, read_tsv
from aiayn.data.preprocess import preprocess
from aiayn.data.shards import ShardedPairs, read_manifest
from aiayn.tokenizers import SentencePiecePair, load_tokenizers
from tiny_runs import kill_and_resume


def _corpus(tmp_path: Path, n: int = 1200) -> Path:
    """Reverse-task pairs as TSV, with one empty pair and one very long pair."""
    rng = random.Random(0)
    words = [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(n)]
    lines = [f"{w}\t{w[::-1]}" for w in words]
    lines[7] = " \tx"  # an empty source
    lines[8] = " ".join(["a b c"] * 100) + "\tx"
    (tmp_path / "c.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "c.tsv"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("shards")
    corpus = _corpus(tmp_path)
    pairs = clean(read_tsv(corpus))
    SentencePiecePair.train(pairs.sources, pairs.targets, vocab_size=300).save(tmp_path / "tok")
    manifest = preprocess(str(corpus), tmp_path / "tok", tmp_path / "data", shard_size=300, workers=2,
                          max_len=40, chunk=100, progress=False)
    return tmp_path, manifest


def test_shards_read_back_as_the_tokenizer_encodes(shards):
    tmp_path, manifest = shards
    pairs = clean(read_tsv(tmp_path / "c.tsv"))
    held = [i for i in range(len(read_tsv(tmp_path / "c.tsv"))) if i % 100 == 0]  # every 100th raw pair validates
    valid = read_tsv(tmp_path / "data" / "valid.tsv")
    assert len(valid) == len(held) == manifest["valid_pairs"]
    tok = load_tokenizers(tmp_path / "data" / "tokenizer")
    raw = read_tsv(tmp_path / "c.tsv")
    kept = [i for i in range(len(raw)) if i % 100]
    train = clean(Parallel([raw.sources[i] for i in kept], [raw.targets[i] for i in kept]))
    expected = [(tok.src.encode(s), tok.tgt.encode(t)) for s, t in zip(train.sources, train.targets, strict=True)]
    expected = [(s, t) for s, t in expected if len(s) <= 40 and len(t) <= 40]
    assert manifest["empty"] == 1 and manifest["too_long"] == 1 and manifest["dtype"] == "uint16"
    assert manifest["pairs"] == len(expected) == len(pairs) - len(held) - 1
    data = ShardedPairs(tmp_path / "data")
    assert len(manifest["shards"]) == 4 and len(data) == len(expected)
    assert data.pairs(list(range(len(data)))) == expected


def test_the_batch_plan_takes_every_pair_once_per_epoch_and_is_seeded(shards):
    tmp_path, _ = shards
    data = ShardedPairs(tmp_path / "data")
    lengths = [(len(s), len(t) + 2) for s, t in data.pairs(list(range(len(data))))]

    def plan(epoch: int, max_len: int = 40) -> list[list[int]]:
        return list(data.batches(epoch, max_len=max_len, max_tokens=64, seed=3, window=250))

    first = plan(0)
    assert sorted(i for b in first for i in b) == list(range(len(data)))
    for batch in first:
        width = max(max(lengths[i]) for i in batch)
        assert len(batch) == 1 or width * len(batch) <= 64
    assert plan(0) == first and plan(1) != first
    short = plan(0, max_len=3)
    assert sorted(i for b in short for i in b) == [i for i, (s, t) in enumerate(lengths) if s <= 3 and t - 2 <= 3]


def test_an_interrupted_preprocess_keeps_its_finished_shards(shards, tmp_path):
    source, manifest = shards
    out = tmp_path / "data"
    subprocess.run(["cp", "-r", str(source / "data"), str(out)], check=True)
    (out / "shards.json").unlink()  # as if killed before the end:
    (out / "train-00003.json").unlink()  # the last shard unfinished
    (out / "train-00003.idx.npy").write_bytes(b"half")
    finished = (out / "train-00000.src.bin").stat().st_mtime_ns
    with pytest.raises(FileNotFoundError, match=r"shards\.json"):
        read_manifest(out)
    again = preprocess(str(source / "c.tsv"), source / "tok", out, shard_size=300, workers=1, max_len=40, chunk=100,
                       progress=False)
    assert again == manifest
    assert (out / "train-00000.src.bin").stat().st_mtime_ns == finished
    assert ShardedPairs(out).pairs(list(range(len(ShardedPairs(out))))) == \
        ShardedPairs(source / "data").pairs(list(range(manifest["pairs"])))


def test_preprocess_command_and_its_errors(tmp_path):
    corpus = _corpus(tmp_path, 300)
    pairs = clean(read_tsv(corpus))
    SentencePiecePair.train(pairs.sources, pairs.targets, vocab_size=300).save(tmp_path / "tok")
    cmd = [sys.executable, "-m", "aiayn", "preprocess", "--data", str(corpus), "--tokenizer", str(tmp_path / "tok"),
           "--output", str(tmp_path / "d"), "--workers", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.splitlines()[-1])["pairs"] == read_manifest(tmp_path / "d")["pairs"]
    bad = subprocess.run([*cmd[:5], str(tmp_path / "nope.tsv"), *cmd[6:]], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.tsv" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.long  # a training process killed and resumed (the trainer's own kill test stays in make test)
def test_training_on_shards_resumes_exactly_after_sigkill(shards, tmp_path):
    source, _ = shards
    killed_at, whole, resumed = kill_and_resume(tmp_path, data=str(source / "data"), max_steps=40, eval_every=10,
                                                max_tokens=128, bleu_sentences=5, model={"dropout": 0.1})
    assert 20 <= killed_at < 40
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_bpe_dropout_on_shards_is_a_clear_error(shards, tmp_path, capsys):
    from aiayn.cli import main

    source, _ = shards
    args = ["train", "--data", str(source / "data"), "--subword-dropout", "0.1", "--output", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "subword_dropout" in err and "segmented once by `aiayn preprocess`" in err
