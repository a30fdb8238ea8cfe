"""benchmarks/recipe_halves.py: each system scored on the whole set and on each half, exactly as sacreBLEU scores
those lines alone, and a change counted as holding only when it gains on both halves."""

import json
import subprocess
import sys
from pathlib import Path

from aiayn.data.datasets import synthetic_pairs
from aiayn.evaluation import score
from aiayn.inference.translator import Translator

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import recipe_halves  # noqa: E402


def test_the_halves_split_the_set_without_overlap_or_gap():
    for count in (1, 2, 7, 1014):
        got = recipe_halves.parts(count)
        first, second = range(count)[got["half1"]], range(count)[got["half2"]]
        assert list(first) + list(second) == list(range(count)) == list(range(count)[got["all"]])
        assert len(first) - len(second) in (0, 1)


def test_a_gain_holds_only_when_both_halves_gain(capsys):
    base = {"all/sacrebleu": 30.0, "half1/sacrebleu": 30.0, "half2/sacrebleu": 30.0}
    recipe_halves.compare("up-both", {"all/sacrebleu": 31.0, "half1/sacrebleu": 30.5, "half2/sacrebleu": 31.5}, base)
    recipe_halves.compare("up-one", {"all/sacrebleu": 31.0, "half1/sacrebleu": 32.5, "half2/sacrebleu": 29.5}, base)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    holds = {x["config"]: x["value"] for x in lines if x["metric"] == "sacrebleu_holds_on_both_halves"}
    assert holds == {"up-both": 1.0, "up-one": 0.0}  # up-one gains on the whole set, but not on its second half
    gains = {(x["config"], x["metric"]): x["value"] for x in lines if x["metric"].endswith("_gain")}
    assert gains[("up-one", "half2/sacrebleu_gain")] == -0.5


def test_each_half_is_scored_as_sacrebleu_scores_its_lines_alone(trained_run, tmp_path):
    pairs = synthetic_pairs("reverse", 41, 3)
    (tmp_path / "src.txt").write_text("\n".join(pairs.sources) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(pairs.targets) + "\n")
    command = [sys.executable, str(SCRIPTS / "recipe_halves.py"), "--source", str(tmp_path / "src.txt"),
               "--reference", str(tmp_path / "ref.txt"), "--system", f"greedy={trained_run}:beam_size=1",
               "--system", f"same={trained_run}:beam_size=1", "--system", f"beam3={trained_run}:beam_size=3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = {(x["config"], x["metric"]): x["value"] for x in map(json.loads, done.stdout.splitlines())}

    hyps = Translator.from_checkpoint(trained_run, decoding={"beam_size": 1}).translate(pairs.sources)
    for part, lines in (("all", slice(0, 41)), ("half1", slice(0, 21)), ("half2", slice(21, 41))):
        expected = score(hyps[lines], pairs.targets[lines]).bleu
        assert abs(got[("greedy", f"{part}/sacrebleu")] - expected) < 1e-3
        assert got[("same", f"{part}/sacrebleu_gain")] == 0.0  # the same system gains nothing...
    assert got[("same", "sacrebleu_holds_on_both_halves")] == 0.0  # ...so it does not hold
    assert ("beam3", "sacrebleu_holds_on_both_halves") in got
    assert ("greedy", "sacrebleu_holds_on_both_halves") not in got  # the first system is the base
