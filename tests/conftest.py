"""Shared test helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn import ModelConfig


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny(**overrides) -> ModelConfig:
    """A tiny config for fast tests (dropout off unless asked)."""
    return ModelConfig.preset("tiny", **{"vocab_size": 40, "dropout": 0.0, "max_len": 64, **overrides})


def random_ids(batch: int, length: int, vocab: int = 40, low: int = 4) -> torch.Tensor:
    """Ids above the special tokens, so none of them is padding."""
    return torch.randint(low, vocab, (batch, length))


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A tiny model trained on the reverse task by the CLI (shared by the CLI, visual and server tests)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    result = subprocess.run(
        [sys.executable, "-m", "aiayn", "train", "--data", "reverse", "--preset", "tiny", "--max-steps", "300",
         "--output", str(out), "--vocab-size", "300", "--max-tokens", "1024", "--eval-every", "100",
         "--schedule", "inverse_sqrt", "--lr", "0.003", "--warmup", "50"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def live_server(trained_run):
    """A real uvicorn server on a free local port, serving the trained tiny model; yields (url, app)."""
    import socket
    import threading
    import time

    import uvicorn

    from aiayn.serve.app import Limits, create_app
    from aiayn.translate import Translator

    app = create_app(Translator.from_checkpoint(trained_run, beam_size=2), Limits(max_chars=200, max_texts=8),
                     max_batch=32, wait_ms=50)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(timeout=10)
