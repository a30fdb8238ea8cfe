"""scripts/recipe_seeds.py: each seed trained, averaged and scored as the recipe says, the spread over the
seeds computed from the per-seed figures, and a seed with a result not trained again."""

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.data.datasets import synthetic_pairs
from tiny_runs import TINY

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "recipe_seeds.py"


def _corpus(folder: Path) -> None:
    """A Multi30k-shaped folder (train / val / test_2016_flickr, .de and .en) of the reverse task."""
    for split, count, seed in (("train", 400, 0), ("val", 20, 1), ("test_2016_flickr", 20, 2)):
        pairs = synthetic_pairs("reverse", count, seed)
        for lang, lines in (("de", pairs.sources), ("en", pairs.targets)):
            with gzip.open(folder / f"{split}.{lang}.gz", "wt") as f:
                f.write("\n".join(lines) + "\n")


def _bench(tmp_path: Path, *seeds: int) -> list[dict]:
    command = [sys.executable, str(BENCH), "--recipe", str(tmp_path / "recipe.yaml"), "--seeds", *map(str, seeds),
               "--output", str(tmp_path / "seeds"), "--data-dir", str(tmp_path / "data"), "--last", "2",
               "--rss-every", "0.5"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.long
def test_each_seed_is_scored_as_the_recipe_says_and_the_spread_is_over_the_seeds(tmp_path):
    (tmp_path / "data").mkdir()
    _corpus(tmp_path / "data")
    recipe = {**TINY, "data": "multi30k", "src_lang": "de", "tgt_lang": "en", "max_steps": 30, "eval_every": 10,
              "keep_last": 3, "decoding": {"beam_size": 2}}
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    lines = _bench(tmp_path, 0, 1)
    got = {(x["config"], x["metric"]): x["value"] for x in lines}
    for seed in (0, 1):
        assert got[(f"recipe/seed{seed}", "steps")] == 30
        assert got[(f"recipe/seed{seed}", "rss_max_mb")] > 100  # sampled while it trained
        result = json.loads((tmp_path / "seeds" / f"seed-{seed}.json").read_text())
        assert result["decoding"]["beam_size"] == 2  # the recipe's decoding, from the checkpoint
        assert (tmp_path / "seeds" / f"seed-{seed}-last2" / "model.safetensors").exists()
    tests = [got[(f"recipe/seed{s}", "test_bleu")] for s in (0, 1)]
    assert got[("recipe/2 seeds", "test_bleu_mean")] == round(statistics.mean(tests), 3)
    assert got[("recipe/2 seeds", "test_bleu_std")] == round(statistics.stdev(tests), 3)
    assert ("recipe", "machine") in got
    weights = [(tmp_path / "seeds" / f"seed-{s}" / "last" / "model.safetensors").read_bytes() for s in (0, 1)]
    assert weights[0] != weights[1], "the two seeds trained the same model"

    log = tmp_path / "seeds" / "seed-0" / "metrics.jsonl"
    before = log.read_text()
    again = {(x["config"], x["metric"]): x["value"] for x in _bench(tmp_path, 0)}
    assert log.read_text() == before  # a seed with a result is not trained again
    assert again[("recipe/seed0", "test_bleu")] == got[("recipe/seed0", "test_bleu")]
    assert not any(x["metric"].startswith("test_tokenized_bleu") for x in lines)  # not asked for: not reported


@pytest.mark.long
def test_a_both_directions_recipe_is_scored_each_way(tmp_path):
    (tmp_path / "data").mkdir()
    _corpus(tmp_path / "data")
    recipe = {**TINY, "data": "multi30k", "src_lang": "de", "tgt_lang": "en", "both_directions": True,
              "max_steps": 20, "eval_every": 10, "keep_last": 2}
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    command = [sys.executable, str(BENCH), "--recipe", str(tmp_path / "recipe.yaml"), "--seeds", "0", "--output",
               str(tmp_path / "seeds"), "--data-dir", str(tmp_path / "data"), "--last", "2",
               "--back-decoding", "length_penalty=1.2", "beam_size=3", "--back-tokenized-bleu", "de"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "seeds" / "seed-0.json").read_text())
    assert result["decoding"]["source_prefix"] == "<2en>"  # the run's own direction, from generation.json
    assert result["back_decoding"] | {"source_prefix": "<2de>", "length_penalty": 1.2, "beam_size": 3} \
        == result["back_decoding"]
    assert result["test_tokenized_bleu"] is None and result["back_test_tokenized_bleu"] is not None
    got = {(x["config"], x["metric"]) for x in map(json.loads, done.stdout.splitlines())}
    assert {("recipe/seed0", "back_test_bleu"), ("recipe/1 seeds", "back_val_bleu_mean")} <= got
