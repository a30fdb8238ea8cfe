"""Ready in seconds, measured as a newcomer measures: on an empty ``$AIAYN_CACHE`` (cold) and again (warm),

- ``aiayn chat`` with one question piped in: seconds to its first printed byte and to its end;
- ``aiayn serve``: seconds to ``/health`` answering, to the first chat answer (the openai client's request), and to
  ``/health`` saying the compiled step is in use (``decoding_step``);
- with ``--llama-cpp``, llama-cpp-python's server (``python -m llama_cpp.server``, ``pip install
  'llama-cpp-python[server]'``) on the same GGUF file: seconds to ``/v1/models`` answering and to its first chat
  answer.

Each command runs alone, one after the other; before the warm run the cold run's compile behind the decoding (a
child process that may outlive a chat) is waited for. Prints JSON lines {"config", "metric", "value", "unit"}.

    python benchmarks/bench_first_run.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                         [--flags --int4 --compile on] [--llama-cpp]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
from common import emit

QUESTION = "What is the capital of France?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(checkpoint: str, flags: list[str], env: dict) -> tuple[float, float]:
    """Seconds to ``aiayn chat``'s first byte on standard output and to its end."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "aiayn", "chat", "--checkpoint", checkpoint, "--temperature",
                                "0", "--max-new-tokens", "32", *flags], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    process.stdin.write(f"{QUESTION}\n".encode())
    process.stdin.close()
    process.stdout.read(1)
    first = time.perf_counter() - start
    process.stdout.read()
    process.wait()
    return first, time.perf_counter() - start


def until(check, timeout: float = 900) -> float:
    """Seconds until ``check()`` is true (polled every 50 ms)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        try:
            if check():
                return time.perf_counter() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError("never ready")


def ask(url: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 32, "temperature": 0}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300).raise_for_status()


def serve(command: list[str], url: str, health: str, env: dict, compiled: bool) -> dict:
    """Seconds to ``health`` answering, to the first chat answer and (``compiled``) to the compiled step in use."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        found = {"ready_s": until(lambda: _alive(process) and httpx.get(f"{url}{health}").status_code == 200)}
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        ask(url, model)
        found["first_answer_s"] = time.perf_counter() - start
        if compiled:
            until(lambda: httpx.get(f"{url}/health").json().get("decoding_step") != "compiling")
            found["compiled_s"] = time.perf_counter() - start
            found["compiled_in_use"] = httpx.get(f"{url}/health").json().get("decoding_step") == "compiled"
        return found
    finally:
        process.terminate()
        process.wait()


def _alive(process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"{process.args[2]} exited ({process.returncode}) before it answered")
    return True


def behind_done() -> None:
    """Wait for any compile behind the decoding still running (a chat's child outlives it)."""
    while subprocess.run(["pgrep", "-f", "aiayn.inference.compile_behind"], capture_output=True).returncode == 0:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a language model: a checkpoint folder or GGUF file")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=["--compile", "on"],
                        help="aiayn's flags for chat and serve (default: --compile on); last on the line")
    parser.add_argument("--llama-cpp", action="store_true", help="llama-cpp-python's server on the same file")
    args = parser.parse_args()
    cache = tempfile.TemporaryDirectory()
    env = {**os.environ, "AIAYN_CACHE": cache.name}
    for run in ("cold", "warm"):
        first, done = chat(args.checkpoint, args.flags, env)
        emit(f"chat/{run}", "first_output_s", first, "s")
        emit(f"chat/{run}", "done_s", done, "s")
        behind_done()
    cache = tempfile.TemporaryDirectory()  # the server's own cold start
    env = {**os.environ, "AIAYN_CACHE": cache.name}
    for run in ("cold", "warm"):
        port = free_port()
        command = [sys.executable, "-m", "aiayn", "serve", "--checkpoint", args.checkpoint, "--port", str(port),
                   *args.flags]
        for metric, value in serve(command, f"http://127.0.0.1:{port}", "/health", env, True).items():
            emit(f"serve/{run}", metric, value, "" if metric == "compiled_in_use" else "s")
        behind_done()
    if args.llama_cpp:
        port = free_port()
        command = [sys.executable, "-m", "llama_cpp.server", "--model", args.checkpoint, "--port", str(port),
                   "--n_threads", "2"]
        for metric, value in serve(command, f"http://127.0.0.1:{port}", "/v1/models", dict(os.environ),
                                   False).items():
            emit("llama.cpp-server", metric, value, "s")


if __name__ == "__main__":
    main()
