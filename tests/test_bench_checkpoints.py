"""benchmarks/bench_checkpoints.py on trained checkpoints: every checkpoint is timed on the same sentences, in
each case, and each speedup is the ratio of the figures it prints."""

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_checkpoints.py"
sys.path.insert(0, str(BENCH.parent))  # the benchmarks import their shared module (benchmarks/common.py)


def test_checkpoints_are_timed_on_the_same_sentences_and_compared_with_the_first(trained_run, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_checkpoints", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / "src.txt").write_text("a b c\nd e f g\nh i\nj k l m n\n")
    bench.checkpoints([f"teacher={trained_run}", f"student={trained_run / 'last'}"], str(tmp_path / "src.txt"),
                      sentences=3, repeats=1)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rates = {r["config"]: r["value"] for r in lines if r["metric"] == "sentences_per_s"}
    cases = ["greedy/b1/3sentences", "beam4/b1/3sentences", "greedy/b16/3sentences", "beam4/b16/3sentences"]
    assert sorted(rates) == sorted(f"{c}/{n}" for c in cases for n in ("teacher", "student"))
    assert all(v > 0 for v in rates.values())
    speedups = {r["config"]: r["value"] for r in lines if r["metric"] == "speedup_vs_teacher"}
    assert sorted(speedups) == sorted(f"{c}/student" for c in cases)
    for case in cases:  # the ratio of the printed (rounded) rates, within rounding
        ratio = rates[f"{case}/student"] / rates[f"{case}/teacher"]
        assert abs(speedups[f"{case}/student"] - ratio) <= 0.002 * ratio + 0.002


def test_a_checkpoint_named_twice_is_timed_with_and_without_its_shortlist(trained_run, tmp_path, capsys):
    from aiayn.data.datasets import synthetic_pairs
    from aiayn.inference.shortlist import build_shortlist
    from aiayn.inference.translator import Translator

    spec = importlib.util.spec_from_file_location("bench_checkpoints", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tok = Translator.from_checkpoint(trained_run).tokenizers
    pairs = synthetic_pairs("reverse", 50, 0)
    ids = zip(tok.src.encode_batch(pairs.sources), tok.tgt.encode_batch(pairs.targets), strict=True)
    build_shortlist(ids, 300, 300, frequent=10, per_token=5).save(tmp_path / "s.safetensors")
    (tmp_path / "src.txt").write_text("\n".join(synthetic_pairs("reverse", 4, 1).sources) + "\n")
    bench.checkpoints([f"full={trained_run}", f"short={trained_run}"], str(tmp_path / "src.txt"), sentences=4,
                      repeats=1, shortlists={"short": str(tmp_path / "s.safetensors")})
    configs = {json.loads(line)["config"] for line in capsys.readouterr().out.splitlines()}
    assert "greedy/b1/4sentences/short" in configs and "beam4/b16/4sentences/full" in configs
