"""benchmarks/bench_engines.py, the one engine-comparison harness: a worker measures one engine in a process of its
own and prints a figure per case and precision, and the ratios are the printed figures' ratios."""

import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import their shared module (benchmarks/common.py)

import common  # noqa: E402
import engines_translation  # noqa: E402


@pytest.mark.long  # a benchmark's worker process over every case: 15 s
def test_a_worker_runs_in_its_own_process_and_times_every_case_and_precision():
    """Every case of every precision timed, and each precision is the path it names: int8 through int8 layers,
    float32 packed for oneDNN or plain, bfloat16 logits."""
    from aiayn.model.cpu import packing_available

    lines, error = common.run_worker(str(BENCHMARKS / "bench_engines.py"), "translation", "aiayn", "tiny",
                                     "--min-seconds", "0")
    assert error is None
    records = list(map(json.loads, lines))
    rates = {r["config"]: r["value"] for r in records if r["metric"] == "generated_tokens_per_s"}
    layers = {r["config"]: r["value"] for r in records if r["metric"] == "layers"}
    bf16 = "PackedLinear" if packing_available(torch.bfloat16) else "Linear"
    assert layers == {"tiny/fp32/aiayn": "PackedLinear/float32", "tiny/int8/aiayn": "Int8Linear/float32",
                      "tiny/bf16/aiayn": f"{bf16}/bfloat16", "tiny/fp32-unpacked/aiayn": "Linear/float32"}
    cases = ["greedy/b1", "greedy/b16", "beam4/b16"]
    for case in cases:
        for variant in ("cache/fp32", "nocache/fp32", "cache/int8", "nocache/int8", "cache/bf16",
                        "cache/fp32-unpacked"):
            assert rates[f"tiny/{case}/{variant}/aiayn"] > 0
    assert common.run_worker(str(BENCHMARKS / "bench_engines.py"), "lm", "nope", "fp32", "/nowhere", "4")[1]


def test_the_ratios_are_the_figures_ratios(capsys):
    engines_translation.ratios({"s/greedy/b1/cache/fp32/aiayn": 300.0, "s/greedy/b1/cache/fp32/hf": 100.0,
                                "s/greedy/b1/cache/fp32/ct2": 200.0, "s/greedy/b1/cache/fp32-unpacked/aiayn": 150.0,
                                "s/greedy/b1/cache/bf16/aiayn": 450.0})
    got = {(r["config"], r["metric"]): r["value"] for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert got == {("s/greedy/b1/cache/fp32", "speedup_vs_hf_generate"): 3.0,
                   ("s/greedy/b1/cache/fp32", "speedup_vs_ctranslate2"): 1.5,
                   ("s/greedy/b1/cache/fp32", "speedup_vs_unpacked"): 2.0,
                   ("s/greedy/b1/cache/bf16", "speedup_vs_hf_generate_fp32"): 4.5,
                   ("s/greedy/b1/cache/bf16", "speedup_vs_fp32"): 1.5}


def test_the_cpu_decode_benchmark_names_the_cpu_and_the_paths_aiayn_chose_on_it(capsys):
    import json

    import bench_cpu_decode

    from aiayn.model.cpu import int8_activations, kernels_available, native_bf16

    bench_cpu_decode.cpu_paths()
    found = {r["metric"]: r["value"] for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert found["native_bf16"] == native_bf16() and found["name"]
    ours = kernels_available()  # aiayn's int8-activation kernels, where they build
    assert found["int8_activations"] == ("int8" if ours or int8_activations() else "bfloat16")
    assert found["int4_activations"] in (("int8",) if ours else ("bfloat16", "float32"))
    assert ("aiayn::q8a8_mm" in found["int8_kernel"]) == ours and ("aiayn::q4a8_mm" in found["int4_kernel"]) == ours


def test_language_model_engines_take_turns_and_each_figure_is_the_best_of_its_turns(monkeypatch, capsys):
    import argparse

    import engines_lm

    rates = {"aiayn-compiled": iter([30.0, 40.0, 35.0]), "llama.cpp": iter([41.0, 28.0, 33.0])}
    peaks = iter([700.0, 450.0, 520.0, 460.0, 530.0, 455.0])
    order = []

    def worker(script, kind, engine, precision, work, new_tokens):
        order.append(engine)
        rate = next(rates[engine])
        figures = {"decode": {"1": rate}, "prefill": 10 * rate, "peak_rss_mb": next(peaks), "ready_s": rate,
                   "tokens": [1]}
        return [json.dumps(figures)], None

    monkeypatch.setattr(engines_lm, "run_worker", worker)
    args = argparse.Namespace(model="m", engines=["aiayn-compiled", "llama.cpp"], precisions=["fp32"],
                              new_tokens=4, script="x", repeats=3)
    results = engines_lm.run_engines(args, Path("/nowhere"))
    assert order == ["aiayn-compiled", "llama.cpp"] * 3  # side by side, turn after turn
    assert results["aiayn-compiled", "fp32"]["decode"] == {"1": 40.0}
    assert results["llama.cpp", "fp32"]["prefill"] == 410.0
    ours = results["aiayn-compiled", "fp32"]
    assert ours["peak_rss_mb"] == 520.0 and ours["ready_s"] == 30.0  # the warm turns' figures
    got = {(r["config"], r["metric"]): r["value"] for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert got["m/aiayn-compiled/fp32/batch1", "decode_vs_llama.cpp"] == round(40 / 41, 3)
    assert got["m/llama.cpp/fp32/batch1", "decode"] == 41.0
