"""benchmarks/bench_prompt_cache.py on a small chat model: a long system prompt, then questions; each server
configuration started, timed, and its answers compared (the cache changes nothing but time)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import chat_checkpoint

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_prompt_cache.py"


def test_the_prompt_cache_benchmark_times_cold_and_warm_and_finds_the_answers_equal(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt", max_len=1024)
    done = subprocess.run([sys.executable, str(BENCH), "--checkpoint", str(folder), "--questions", "3",
                           "--system-tokens", "60"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    found = {(r["config"], r["metric"]): r["value"] for r in lines}
    for config in ("default", "no-prompt-cache"):
        cold, warm = found[(config, "ttft_cold_ms")], found[(config, "ttft_warm_ms")]
        assert cold > 0 and warm > 0 and abs(found[(config, "speedup")] - cold / warm) < 0.01 * cold / warm + 0.01
    assert found[("all", "answers_equal")] is True


@pytest.mark.long  # a server and a benchmark's client: 9 s
def test_the_completions_mode_asks_a_base_model_through_v1_completions(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt", max_len=1024)
    done = subprocess.run([sys.executable, str(BENCH), "--checkpoint", str(folder), "--questions", "2",
                           "--system-tokens", "60", "--completions"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = {(r["config"], r["metric"]): r["value"] for r in map(json.loads, done.stdout.splitlines())}
    assert found[("default", "ttft_cold_ms")] > 0 and found[("no-prompt-cache", "ttft_warm_ms")] > 0
    assert found[("all", "answers_equal")] is True


def test_the_chat_mode_times_each_turn_with_and_without_the_cache_and_compares_the_replies(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt", max_len=1024)
    done = subprocess.run([sys.executable, str(BENCH), "--checkpoint", str(folder), "--chat-turns", "3",
                           "--system-tokens", "60"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = {(r["config"], r["metric"]): r["value"] for r in map(json.loads, done.stdout.splitlines())}
    assert all(found[(c, m)] > 0 for c in ("chat", "chat-no-prompt-cache") for m in ("ttft_turn1_ms", "ttft_turn3_ms"))
    assert found[("chat", "replies_equal")] is True


@pytest.mark.long  # a server, streams and a long prompt: 14 s
def test_the_joining_mode_times_running_streams_while_a_long_prompt_is_computed(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt", max_len=1024)
    done = subprocess.run([sys.executable, str(BENCH), "--checkpoint", str(folder), "--join-tokens", "100",
                           "--streams", "2", "--chunks", "0", "16",
                           "--join-after", "0.05", "--plain-seconds", "0.3", "--stream-tokens", "500"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = {(r["config"], r["metric"]): r["value"] for r in map(json.loads, done.stdout.splitlines())}
    assert found[("no-join", "p99_inter_token_ms")] > 0 and ("no-join", "joining_ttft_ms") not in found
    for config in ("default", "prefill-chunk-0", "prefill-chunk-16"):
        assert found[(config, "joining_ttft_ms")] > 0 and found[(config, "p99_inter_token_ms")] > 0
        ratio = found[(config, "p99_inter_token_ms")] / found[("no-join", "p99_inter_token_ms")]
        assert found[(config, "p99_over_no_join")] == pytest.approx(ratio, rel=0.05, abs=0.02)  # of rounded p99s
