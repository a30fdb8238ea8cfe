"""The decoding step compiled behind the decoding: where ``--compile`` would compile (``compiled.py``) and no
compiled step is kept yet, a child process loads the same checkpoint, compiles its step and keeps it in aiayn's
cache folder, while this process decodes eagerly at once; when the child is done, the kept step is loaded by a thread
(seconds, while the decoding goes on) and taken over between two steps, the tokens (greedy) those of either step
alone. A child process and not a thread:
compiling holds Python's lock for most of a minute, which the decoding beside it would wait on. A step kept already
is loaded by a thread (:class:`LoadBehind`: a few seconds, mostly outside Python's lock) while the decoding starts.

    python -m aiayn.inference.compile_behind CHECKPOINT [--int8 | --int4 | --bf16] [--batches] [--columns] --threads N
                                             --expect PATH
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from aiayn.inference.compiled import attach, kinds_of, prepared, saved_path, why_eager
from aiayn.inference.graphs import frozen


class CompileBehind:
    """A child process compiling ``model``'s step (the model of ``checkpoint`` loaded with ``precision``: ``int8``,
    ``int4``, ``bf16`` flags) for one row and, as ``graphs`` asks (``batches``, ``columns``: ``attach``'s), a running
    batch and a verifying pass; once it has kept them, a :class:`LoadBehind` loads them. ``waiting``: True until
    :meth:`take_over` has run (then the model's ``runtime.static`` says whether the step is in use)."""

    def __init__(self, model, device: str, checkpoint: str, precision: dict, graphs: dict,
                 say: Callable[[str], None]) -> None:
        self.model, self.device, self.graphs, self.say, self.waiting = model, device, graphs, say, True
        self.loader: LoadBehind | None = None
        command = self.command(model, checkpoint, precision, graphs)
        self.started, self.errors = time.perf_counter(), tempfile.TemporaryFile()  # noqa: SIM115 (read at its end; a pipe could fill up)
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.errors)
        say("compiling the decoding step behind the decoding (a child process; about a minute a graph the first "
            "time on this machine): decoding eagerly until it is ready")

    @staticmethod
    def command(model, checkpoint: str, precision: dict, graphs: dict) -> list[str]:
        """The child's command line (this module's :func:`main`)."""
        flags = [f"--{name}" for name, on in {**precision, **graphs}.items() if on is True]  # the switches
        return [sys.executable, "-m", "aiayn.inference.compile_behind", str(checkpoint), *flags,
                "--threads", str(torch.get_num_threads()), "--expect", str(saved_path(model))]

    @property
    def done(self) -> bool:
        """The child has ended and what it kept is loaded (or it failed): :meth:`take_over` will not wait."""
        if self.process.poll() is None:
            return False
        return self._loading().done

    def wait(self) -> None:
        self.process.wait()
        self._loading().wait()

    def _loading(self) -> LoadBehind:
        """The thread that loads what the child kept, started once the child has ended (nothing to load if it
        failed)."""
        if self.loader is None:
            graphs = self.graphs if self.process.returncode == 0 else None
            self.loader = LoadBehind(self.model, self.device, graphs, self.say)
        return self.loader

    def take_over(self) -> bool:
        """Between two steps, once :attr:`done`: the kept step, loaded by then, attached (True), or the child's
        failure said and the eager step kept (False). :attr:`waiting` stays True until the step is attached or given
        up (a server's ``/health`` says ``compiling`` until then, never ``eager`` while it loads)."""
        took = time.perf_counter() - self.started
        self.wait()
        if self.process.returncode != 0:
            self.errors.seek(0)
            last = self.errors.read().decode(errors="replace").strip().splitlines()[-1:] or [
                f"exit status {self.process.returncode}"]
            self.waiting = False
            self.say(f"decoding eagerly: the compile behind the decoding failed ({last[0][:200]})")
            return False
        self.model.runtime.static, self.waiting = self.loader.static, False
        if self.loader.static is None:
            self.say("decoding eagerly: the compiled step the child kept did not load")
            return False
        self.say(f"compiled the decoding step in {took:.1f} s behind the decoding: decoding with it from here")
        return True

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class LoadBehind:
    """A kept compiled step loaded by a thread while ``model`` decodes eagerly (:class:`CompileBehind`'s interface;
    ``graphs`` as ``attach`` takes them; None: nothing to load)."""

    process = None  # no child process: nothing goes on after the run

    def __init__(self, model, device: str, graphs: dict | None, say: Callable[[str], None]) -> None:
        self.model, self.say, self.waiting, self.static = model, say, True, None
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=self._load, args=(device, graphs), name="aiayn-load-step", daemon=True)
        self.thread.start()

    def _load(self, device: str, graphs: dict | None) -> None:
        if graphs is not None:
            self.static = prepared(self.model, "on", device, say=lambda _line: None, **graphs)

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def wait(self) -> None:
        self.thread.join()

    def take_over(self) -> bool:
        """Between two steps, once :attr:`done`: the loaded step attached (True), or the eager step kept (False)."""
        self.thread.join()
        self.model.runtime.static, self.waiting = self.static, False
        if self.static is None:
            self.say("decoding eagerly: the kept compiled step did not load")
            return False
        self.say(f"loaded the compiled decoding step in {time.perf_counter() - self.started:.1f} s behind the "
                 "decoding: decoding with it from here")
        return True

    def stop(self) -> None:
        """Nothing to stop: the thread ends with the process."""


def compile_behind(model, mode: str, device: str, checkpoint: str, precision: dict, batches: bool = False,
                   columns: bool = False,
                   say: Callable[[str], None] | None = None) -> CompileBehind | LoadBehind | None:
    """``--compile mode`` for a run without a wait: a compiled step already kept is loaded by a thread
    (:class:`LoadBehind`), one to compile is compiled by a child process (:class:`CompileBehind`), both while the
    model decodes eagerly, and taken over between two steps when done; one that cannot be kept (a frozen graph) is
    compiled now (:func:`~aiayn.inference.compiled.attach`), and where the model decodes eagerly ``attach`` says why
    (None returned then). ``batches``, ``columns``: the graphs beside one row's, as ``attach`` takes them."""
    say = say or (lambda line: print(f"aiayn: {line}", file=sys.stderr, flush=True))
    graphs = {"batches": batches, "columns": columns}
    if why_eager(model, mode, device) is not None or frozen(model):
        attach(model, mode, device, say, **graphs)
        return None
    if all(saved_path(model, kind).is_file() for kind in kinds_of(**graphs)):
        return LoadBehind(model, device, graphs, say)
    return CompileBehind(model, device, checkpoint, precision, graphs, say)


def main(argv: list[str] | None = None) -> int:
    """The child: load the checkpoint as the parent did, check that its step is the parent's (``--expect``: the
    file the parent will load), compile and keep it."""
    parser = argparse.ArgumentParser(prog="python -m aiayn.inference.compile_behind", description=__doc__)
    parser.add_argument("checkpoint")
    for flag in ("int8", "int4", "bf16", "batches", "columns"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--expect", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from aiayn.inference.generator import TextGenerator

    model = TextGenerator.from_checkpoint(args.checkpoint, int8=args.int8, int4=args.int4, bf16=args.bf16).model
    if saved_path(model) != Path(args.expect):
        print(f"{args.checkpoint}: the step loaded here is not the parent's (another precision or layout)",
              file=sys.stderr)
        return 3
    return 0 if attach(model, "on", batches=args.batches, columns=args.columns) else 1


if __name__ == "__main__":
    sys.exit(main())
