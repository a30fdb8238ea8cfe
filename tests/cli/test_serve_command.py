"""``aiayn serve`` itself: its flags reach the server, its defaults are the documented limits (docs/serving.md),
it binds this machine only, and all computing happens on one thread while the main thread keeps one compute
thread (serve/threads.py)."""

import dataclasses
import threading

import torch
from fastapi.testclient import TestClient

from aiayn.cli import main
from aiayn.serve import server as app_module
from aiayn.serve.limits import Limits


def _serve(monkeypatch, argv: list[str]):
    """Run ``aiayn serve ARGV`` up to the point where uvicorn would start; returns uvicorn's config."""
    seen = {}
    monkeypatch.setattr(app_module, "serve_until_stopped", lambda config: seen.setdefault("config", config))
    threads = torch.get_num_threads()
    try:
        assert main(["serve", *argv]) == 0
        seen["main_threads"] = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    seen["threads"] = threads
    return seen


def test_serve_defaults_are_the_documented_limits_and_this_machine_only(monkeypatch, trained_run):
    seen = _serve(monkeypatch, ["--checkpoint", str(trained_run), "--port", "8123"])
    config = seen["config"]
    assert (config.host, config.port, config.timeout_keep_alive) == ("127.0.0.1", 8123, 5)
    assert config.limit_concurrency == Limits().max_connections == 64
    assert config.timeout_graceful_shutdown == Limits().shutdown_grace_s == 30.0
    with TestClient(config.app) as client:
        limits = client.get("/health").json()["limits"]
    assert limits == dataclasses.asdict(Limits())
    assert (limits["max_chars"], limits["max_texts"], limits["max_new_tokens"], limits["max_beam_size"]) == \
        (1000, 64, 256, 16)


def test_serve_flags_reach_the_server(monkeypatch, trained_run):
    seen = _serve(monkeypatch, ["--checkpoint", str(trained_run), "--host", "0.0.0.0", "--max-chars", "12",
                                "--max-connections", "7", "--read-timeout-s", "2.5"])
    config = seen["config"]
    assert (config.host, config.limit_concurrency) == ("0.0.0.0", 7)
    with TestClient(config.app) as client:
        assert client.get("/health").json()["limits"]["read_timeout_s"] == 2.5
        answer = client.post("/translate", json={"text": "a b c d e f g h"})  # 15 characters, over 12
        assert answer.status_code == 413 and "12" in answer.json()["detail"]
        assert client.post("/translate", json={"text": "a b c"}).status_code == 200


def test_all_computing_is_on_one_thread_with_every_compute_thread(monkeypatch, trained_run):
    """The main thread is left with one compute thread; the model runs only on the one decoding thread, which
    has the compute threads the process had."""
    seen = _serve(monkeypatch, ["--checkpoint", str(trained_run)])
    assert seen["main_threads"] == 1
    app = seen["config"].app
    calls = []
    model = app.state.batcher.model  # the scheduler's: the model every request runs on
    original = model.encode

    def recording(*args, **kwargs):
        calls.append((threading.get_ident(), torch.get_num_threads()))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "encode", recording)
    with TestClient(app) as client:
        done = [threading.Thread(target=client.post, args=("/translate",), kwargs={"json": {"text": t}})
                for t in ("a b", "c d e", "f g h i", "j k")]
        for t in done:
            t.start()
        for t in done:
            t.join()
    assert len(calls) >= 1 and {ident for ident, _ in calls} != {threading.get_ident()}
    assert len({ident for ident, _ in calls}) == 1, "the model ran on more than one thread"
    assert {n for _, n in calls} == {seen["threads"]}
