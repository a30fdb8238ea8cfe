"""What the benchmarks share: each figure printed as one JSON line, a server started in its own process (and its
memory read), the best of several timings, percentiles."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import typing
from dataclasses import dataclass
from pathlib import Path


def emit(config, metric: str, value, unit: str, digits: int | None = 3, stream=None) -> None:
    """Print ``{"config", "metric", "value", "unit"}`` as one JSON line, flushed; a float value rounded to
    ``digits`` decimals (None: as it is); ``stream``: where to (default: this process's stdout)."""
    if digits is not None and isinstance(value, float):
        value = round(value, digits)
    line = json.dumps({"config": config, "metric": metric, "value": value, "unit": unit})
    print(line, file=stream or sys.stdout, flush=True)


def best_of(repeats: int, run) -> float:
    """The fastest of ``repeats`` calls of ``run()`` (seconds): the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def decode_rate(model, cache, length: int, steps: int = 16) -> float:
    """Batch-1 new tokens/s of ``steps`` one-token steps from a cache holding ``length`` positions (rolled back
    after each run; the best of three after a warm-up)."""
    import torch

    ids = torch.tensor([[model.config.bos_id]])

    def run() -> None:
        for _ in range(steps):
            model.decode(ids, cache=cache, last=True)
        cache.truncate(length)

    run()  # warm-up
    return steps / best_of(3, run)


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (1-99) of ``values``; NaN for fewer than two."""
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")


@dataclass
class Server:
    """One ``aiayn serve`` process on a free port; its stderr goes to ``log`` (a file: a pipe nobody reads would
    stall it)."""
    name: str
    proc: subprocess.Popen
    url: str
    port: int
    log: typing.IO[str]

    def sample(self) -> dict[str, float]:
        """RSS and peak RSS (MB), open file descriptors and threads of the process."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
        field_of = {line.split(":")[0]: line.split()[1] for line in status
                    if line.startswith(("VmRSS:", "VmHWM:", "Threads:"))}
        fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        return {"rss": int(field_of["VmRSS"]) / 1024, "peak_rss": int(field_of["VmHWM"]) / 1024, "fds": fds,
                "threads": int(field_of["Threads"])}

    def stop(self) -> None:
        """SIGTERM, then wait for it to drain and exit (killed after 30 s); the log is closed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def compiled(url: str, proc: subprocess.Popen, seconds: float = 900) -> None:
    """Wait while the server's step is compiled behind its decoding (/health's ``decoding_step``), so that what is
    measured is the compiled step's speed, as a server that compiled before opening gave it."""
    import httpx

    for _ in range(int(seconds * 10)):
        if httpx.get(f"{url}/health", timeout=5).json().get("decoding_step") != "compiling" or proc.poll() is not None:
            return
        time.sleep(0.1)


def start_server(name: str, checkpoint: str, *flags: str, log_dir: str | None = None, seconds: float = 120) -> Server:
    """``aiayn serve --checkpoint CHECKPOINT FLAGS`` (an empty ``checkpoint``: ``aiayn serve FLAGS``, as ``--models
    DIR``) on a free port, returned once GET /health answers and its step is no longer compiling (:func:`compiled`);
    its stderr
    in a temporary file, or in ``log_dir`` as NAME.log. Exits with the server's last words if it dies first."""
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tempfile.TemporaryFile("w+") if log_dir is None else open(Path(log_dir) / f"{name}.log", "w+")  # noqa: SIM115
    source = ["--checkpoint", checkpoint] if checkpoint else []
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", *source, "--port", str(port), *flags],
                            stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(int(seconds * 10)):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                compiled(url, proc)
                return Server(name, proc, url, port, log)
        except httpx.HTTPError:
            time.sleep(0.1)
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"{name} server exited: {log.read()[-2000:]}")
    proc.kill()
    raise SystemExit(f"the {name} server did not start within {seconds:g} s")


ENGINE_MODULES = {"aiayn": "aiayn", "aiayn-compiled": "aiayn", "hf": "transformers", "ct2": "ctranslate2",
                  "llama.cpp": "llama_cpp"}


def available(engines: list[str]) -> list[str]:
    """The engines whose library is installed, aiayn first; the others are named on stderr as skipped."""
    import importlib.util

    found = [e for e in engines if importlib.util.find_spec(ENGINE_MODULES[e]) is not None]
    for engine in sorted(set(engines) - set(found)):
        print(f"skipping {engine}: {ENGINE_MODULES[engine]} is not installed (pip install -e '.[bench]')",
              file=sys.stderr)
    return sorted(found, key=lambda e: e != "aiayn")


def run_worker(script: str, *args: str) -> tuple[list[str], str | None]:
    """``python SCRIPT --worker ARGS`` in a process of its own (one engine's thread pool never meets another's):
    the lines it printed, and None; or no lines and the last line of its error."""
    done = subprocess.run([sys.executable, script, "--worker", *args], capture_output=True, text=True)
    if done.returncode:
        return [], (done.stderr.strip().splitlines() or ["?"])[-1][:200]
    return done.stdout.splitlines(), None
