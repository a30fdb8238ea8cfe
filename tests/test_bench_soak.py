"""benchmarks/bench_soak.py in its two-minute version (the 30-minute figures are in docs/serving.md): a
language-model server with an API key and a translation server under a steady mix of streamed, whole, dropped,
over-limit and unauthorised requests: no 5xx, no request lost, nothing left open, file descriptors back where
they were, memory within 15% of its value at minute one for the second; SIGTERM under load lets the streams in
flight end whole, exits 0 and leaves nothing listening. The same checks in seconds run in ``make test``."""

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import chat_checkpoint

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_soak.py"
sys.path.insert(0, str(BENCH.parent))  # the benchmarks import their shared module (benchmarks/common.py)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_soak", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def check(figures: dict, bench) -> None:
    """What a soak of any length must show."""
    summary = {k: v for k, v in figures.items() if not k.endswith("per_minute")}
    bad = f"5xx or lost: {figures['lost_examples']}; {summary}"  # a string: shown whole, not cut as a dict is
    assert figures["5xx"] == 0 and figures["lost"] == 0, bad
    assert figures["kinds_exercised"] == sorted(kind.__name__ for kind, *_ in bench.MIX), summary
    assert min(figures["ok"], figures["refused"], figures["cancelled"]) > 0, summary
    assert figures["requests"] == sum(figures[r] for r in bench.RESULTS)
    for name in ("lm", "mt"):
        assert figures[f"{name}_open_requests_after"] == 0, summary  # no dropped request left a row behind
        assert figures[f"{name}_fds_rest_after"] <= figures[f"{name}_fds_rest_before"] + 2, summary
        assert figures[f"{name}_threads_max_late"] <= figures[f"{name}_threads_max_early"] + 2, summary
        assert figures[f"{name}_rss_growth"] < 1.15, summary  # the second half against its start
    assert figures["in_flight"] == figures["in_flight_whole"] == 3, summary  # streams running at SIGTERM end whole
    assert figures["exit_code"] == 0 and figures["listening_after"] == 0, summary
    assert figures["translator_exit_code"] == 0, summary


@pytest.mark.long  # a soak: two servers under mixed load
def test_seconds_of_mixed_load_lose_nothing_and_sigterm_drains(trained_run, tmp_path):
    """The soak's checks in seconds: 9 s of load at 8 requests a second, counted at rest 5.5 s after it."""
    bench = _bench()
    lm = chat_checkpoint(tmp_path / "lm")
    check(bench.soak(str(lm), str(trained_run), minutes=0.15, rate=8, every=2, warmup=3, rest=5.5, drain_load=8),
          bench)


@pytest.mark.long
def test_two_minutes_of_mixed_load_lose_nothing_and_sigterm_drains(trained_run, tmp_path):
    bench = _bench()
    lm = chat_checkpoint(tmp_path / "lm")
    check(bench.soak(str(lm), str(trained_run), minutes=2, rate=6, every=5, warmup=10), bench)
