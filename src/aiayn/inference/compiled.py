"""The decoding step compiled once: ``model/static.py``'s step (shapes that do not change from token to token)
through ``torch.compile`` (Inductor, ``fullgraph``, its C++ wrapper), attached to a language model so that its
``step`` takes the compiled graph for one row (and, in a server, a running batch) and the eager path elsewhere.

One graph serves every position and every cache size: the cache column is a tensor and the caches' capacity is
marked dynamic, so a generation never recompiles. The graph is compiled ahead of time and kept in aiayn's cache
folder (``$AIAYN_CACHE/compiled``, Inductor's own caches in ``$AIAYN_CACHE/inductor``): the first compile on a
machine takes about a minute, a later start loads it in seconds.
``--compile auto|on|off`` (``aiayn generate``, ``chat``, ``serve``): auto compiles where a C++ compiler is
present, on the CPU, an ``--int8`` or ``--int4`` model large enough to gain (``AUTO_PARAMETERS``) for a session
or, where its compiled step is kept already, a generation of ``AUTO_TOKENS`` or more; anything else decodes
eagerly, with one line saying why (under ``on``, or after a failed compile).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from torch._inductor import config as inductor_config
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
from torch.fx.experimental import _config as fx_config

from aiayn.inference.graphs import Frozen, frozen, mark_dynamic
from aiayn.inference.precision import weight_count
from aiayn.io.files import atomic_path, cache_dir
from aiayn.kernels import compiler, cpu_flags
from aiayn.model.state import DecodeState
from aiayn.model.static import advance, span_of, static_inputs

MODES = ("auto", "on", "off")
AUTO_PARAMETERS = 100_000_000  # below this auto decodes eagerly: a minute's first compile outweighs the gain
AUTO_TOKENS = 400  # loading a kept graph (~2 s) over what each token saves (int4 SmolLM2: 13.3 -> 6.8 ms)
KEEP = 16  # compiled steps kept in the cache folder, the most recently used (3.4 MB each for SmolLM2 int4)


KINDS = ("row", "rows", "columns")  # the graphs a step may have: one token of one row, of 2 rows or more, several
# tokens of one row (a verifying pass of speculative decoding)


def kinds_of(batches: bool = False, columns: bool = False) -> tuple[str, ...]:
    """The graphs a step has: one row's, and those ``batches`` (``rows``) and ``columns`` ask for."""
    return ("row",) + ("rows",) * batches + ("columns",) * columns


def kind_of(tokens: Tensor) -> str:
    """Which graph steps the new ``tokens`` (B, C): :data:`KINDS`."""
    return "columns" if tokens.size(1) > 1 else "rows" if tokens.size(0) > 1 else "row"


class CompiledStep:
    """``model``'s static step (``DecoderOnly.step_static``) compiled (or as it is, ``compiled=False``: the reference
    the tests hold it to), called by ``DecoderOnly.step`` for the steps it computes
    (:func:`~aiayn.model.static.static_inputs`): one graph for one row and one token (``row``), with ``batches`` one
    for any number of rows from 2 (``rows``: the batch size marked dynamic, a server's running batch; a size of one
    is a graph's own), with ``columns`` one for a row's 2 to ``static.COLUMNS`` tokens (``columns``: their count
    marked dynamic, speculative decoding's verifying pass of any number of guesses). Several rows of several tokens
    step eagerly.

    Each graph is built at its first step. With ``saved`` (its path in aiayn's cache folder by kind,
    :func:`saved_path`) it is compiled ahead of time (``aot_compile``: no Dynamo lookup at each token) and kept
    there, so that a later start loads it in seconds; a file that does not fit the inputs or does not load is
    compiled again and replaced.
    ``freezing`` (the weights folded into the graph as constants: Inductor lowers oneDNN's packed linear layers only
    so) compiles through ``torch.compile`` at every start: ``aot_compile`` does not take a frozen graph."""

    def __init__(self, model, compiled: bool = True, freezing: bool = False, saved: dict[str, Path] | None = None,
                 batches: bool = False, columns: bool = False) -> None:
        self.compiled, self.freezing, self.saved = compiled, freezing, saved
        self.kinds = kinds_of(batches, columns)
        self.compiled_here = False  # a graph was compiled in this process (not loaded from ``saved``)
        self.step = functools.partial(type(model).step_static, model)  # the weights the graph's, not its inputs
        self.graphs: dict[str, Callable] = {} if compiled else dict.fromkeys(KINDS, self.step)  # by kind_of

    @property
    def loaded(self) -> bool:
        """Every graph built so far came from ``saved``."""
        return self.compiled and bool(self.graphs) and not self.compiled_here

    def __reduce__(self) -> tuple:
        """A model copied or pickled (Dynamo pickles the model it guards, with its attributes) keeps no compiled
        step: its copy decodes eagerly."""
        return type(None), ()

    @torch.no_grad()  # a decoding step (a graph for no autograd)
    def __call__(self, model, tokens: Tensor, state: DecodeState, last: bool = False) -> Tensor | None:
        """Logits (B, C, V) of the new positions (``last``: a prompt's, which steps eagerly), the caches written
        and advanced; None where it does not apply (the model then steps eagerly)."""
        inputs = static_inputs(model, tokens, state, last)
        if inputs is None or kind_of(inputs[0]) not in self.kinds or min(inputs[0].shape) > 1:
            return None
        new, left_pad, kv = inputs
        column = torch.tensor([state.position], device=new.device)
        windows = [layer.self_kv.window for layer in state.cache.layers]
        full = next((kv.capacity for kv in (layer.self_kv for layer in state.cache.layers) if kv.window is None), None)
        span = None if full is None else torch.empty(span_of(state.position + new.size(1) - 1, full),
                                                     dtype=torch.int8, device=new.device)  # a full layer's span
        args = (new.clone(memory_format=torch.contiguous_format), column, left_pad, kv, windows, span)  # (B, C),
        # its strides (C, 1) whatever the text's width
        kind = kind_of(new)
        if kind not in self.graphs:
            self.graphs[kind] = self._build(model, args, kind)
        logits = self.graphs[kind](*args)
        advance(state.cache, new.size(1))
        return logits

    def _build(self, model, args: tuple, kind: str) -> Callable:
        """The graph of ``kind`` for ``args``: loaded from ``saved`` where it fits them, else compiled (and
        saved)."""
        if self.freezing:
            self.compiled_here = True
            return Frozen(self.step, kind)
        saved = None if self.saved is None else self.saved[kind]
        if saved is not None and saved.is_file():
            try:
                with open(saved, "rb") as file, inductor_config.patch({"cpp.vec_isa_ok": True}):
                    fn = torch.compiler.load_compiled_function(file, external_data={"model": model})
                if fn.guard_check(*args):  # the graph was made for inputs like these
                    fn.disable_guard_check()
                    os.utime(saved)  # recently used: kept longest
                    return fn
            except Exception:  # a file that does not load (another version wrote it): compiled again
                pass
        self.compiled_here = True
        mark_dynamic(args, kind)
        fn = torch.compile(self.step, fullgraph=True, dynamic=False,
                           options={"cpp_wrapper": True, "guard_filter_fn": _input_guards}).aot_compile((args, {}))
        fn.disable_guard_check()  # one graph; static_inputs and the batch size choose the steps it takes
        if saved is not None:
            try:
                saved.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(saved) as tmp:
                    fn.save_compiled_function(str(tmp), external_data={"model": model})
                prune(saved.parent)
            except OSError:  # a read-only or full cache folder: not kept, the next start compiles again
                pass
        return fn


def _input_guards(entries) -> list[bool]:
    """The guards a graph compiled ahead of time keeps: global state, shapes and the step's input tensors; none on
    the model's modules and weights (about 7,000 for SmolLM2, rebuilt at every load: 0.8 s), which the file's
    digest names instead (:func:`saved_path`)."""
    return [entry.guard_type in ("GLOBAL_STATE", "SHAPE_ENV")
            or (entry.guard_type == "TENSOR_MATCH" and entry.name.startswith("args")) for entry in entries]


def prune(folder: Path, keep: int = KEEP) -> None:
    """Delete all but the ``keep`` most recently used compiled steps in ``folder`` (aiayn's own files: a new
    version of aiayn or of a model leaves its old ones behind)."""
    steps = sorted(folder.glob("step-*.bin"), key=lambda path: path.stat().st_mtime, reverse=True)
    for path in steps[keep:]:
        path.unlink(missing_ok=True)


def saved_path(model, kind: str = "row") -> Path:
    """Where ``model``'s compiled step (its graph of ``kind``, :data:`KINDS`) is kept:
    ``$AIAYN_CACHE/compiled/step-<digest>-<kind>.bin``, the digest of all that shapes the graph (PyTorch's version,
    aiayn's source, the model's config and tensors, the CPU's features, the compiler, the compute threads). It is a
    file aiayn writes and reads in its own cache folder (Dynamo's pickled artefact), never one a user hands it."""
    tensors = itertools.chain(model.named_parameters(), model.named_buffers())
    parts = {"torch": torch.__version__, "config": model.config.to_dict(), "cpu": sorted(cpu_flags()),
             "compiler": compiler(), "threads": torch.get_num_threads(),
             "tensors": [(name, list(t.shape), str(t.dtype)) for name, t in tensors],
             "modules": sorted({type(m).__qualname__ for m in model.modules()}), "source": _source_digest()}
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return cache_dir() / "compiled" / f"step-{digest}-{kind}.bin"


@functools.cache
def _source_digest() -> str:
    """aiayn's source (every .py and .cpp file), hashed once a process: a start asks for several steps' paths."""
    sources = sorted(p for p in Path(__file__).parents[1].rglob("*") if p.suffix in (".py", ".cpp"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()


def why_eager(model, mode: str, device: torch.device | str = "cpu", tokens: int | None = None) -> str | None:
    """Why ``model`` decodes eagerly under ``--compile mode`` on ``device``; None: it is compiled. ``tokens``: the
    new tokens one run makes (``aiayn generate``); None: a session that lasts (chat, a server)."""
    if mode not in MODES:
        raise ValueError(f"--compile: one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return "--compile off"
    if model.config.arch != "decoder-only" or model.decoder.position_bias is not None:
        return "only a decoder-only model without a relative position bias has a compiled step"
    if model.runtime.world > 1 or model.runtime.adapter_rows is not None:
        return "a model split over processes or serving LoRA adapters steps eagerly"
    if model.runtime.kv_cache_dtype == torch.int8:
        return "an int8 KV cache steps eagerly (its attention reads the int8 rows: aiayn::int8_attention)"
    if torch.device(device).type != "cpu":
        return f"the compiled step is built for the CPU, not {torch.device(device).type}"
    if compiler() is None:
        return "no C++ compiler (g++, c++ or clang++) on PATH: install one to compile"
    if mode == "auto":
        size = weight_count(model)
        if size < AUTO_PARAMETERS:
            return f"--compile auto: {size / 1e6:.0f}M parameters, below the {AUTO_PARAMETERS // 10**6}M where it gains"
        if frozen(model):
            return ("--compile auto compiles --int8 and --int4 models and unpacked float ones: a packed float model's "
                    "graph holds its weights (Inductor's freezing), which is not cached, so every start would compile "
                    "again (--compile on)")
        if tokens is not None and not saved_path(model).is_file():
            return ("--compile auto: no compiled step kept for this model yet, and a first compile (about a minute) "
                    "outweighs one generation (--compile on, or a chat or server, keeps one)")
        if tokens is not None and tokens < AUTO_TOKENS:
            return (f"--compile auto: {tokens} new tokens, fewer than the {AUTO_TOKENS:,} that repay loading the kept "
                    "compiled step (--compile on)")
    return None


def attach(model, mode: str = "auto", device: torch.device | str = "cpu",
           say: Callable[[str], None] | None = None, tokens: int | None = None, batches: bool = False,
           columns: bool = False) -> bool:
    """Compile ``model``'s decoding step under ``--compile mode`` and attach it (``model.runtime.static``):
    :func:`prepared` at once. Returns whether it is compiled."""
    model.runtime.static = prepared(model, mode, device, say, tokens, batches, columns)
    return model.runtime.static is not None


def prepared(model, mode: str = "auto", device: torch.device | str = "cpu",
             say: Callable[[str], None] | None = None, tokens: int | None = None, batches: bool = False,
             columns: bool = False) -> CompiledStep | None:
    """``model``'s decoding step under ``--compile mode``, loaded where it is kept or compiled, on a scratch cache
    (a progress line, then the time it took), not attached (the model may go on decoding meanwhile); None where
    the model decodes eagerly, and ``say`` (default: standard error, after ``aiayn:``) gets one line saying why,
    under ``on`` or after a compile that failed (``tokens`` as :func:`why_eager` takes it). ``batches``: a graph
    for batches of 2 rows or more too (a server's); ``columns``: one for several tokens of a row (a model verifying
    a draft's guesses)."""
    say = say or (lambda line: print(f"aiayn: {line}", file=sys.stderr, flush=True))
    reason = why_eager(model, mode, device, tokens)
    if reason is None:
        use_cache_folder()
        fx_config.use_duck_shape = False  # caches of equal sizes (a short text's ring and
        # its full layers) still get a size each: a later, longer text's do not recompile
        packed = frozen(model)
        static = CompiledStep(model, freezing=packed, batches=batches, columns=columns)
        static.saved = None if packed else {kind: saved_path(model, kind) for kind in static.kinds}  # frozen: not kept
        if static.saved is None or not all(path.is_file() for path in static.saved.values()):
            kept = saved_path(model).parent if static.saved else os.environ["TORCHINDUCTOR_CACHE_DIR"]
            say(f"compiling the decoding step (kept in {kept}: about a minute a graph the first time on this "
                "machine) ...")
        start = time.perf_counter()
        try:
            warm_up(model, static)
        except Exception as error:  # any failure to compile leaves the eager step, said in one line
            reason = f"it did not compile ({type(error).__name__}: {str(error).strip().splitlines()[0][:200]})"
        else:
            done = "loaded the compiled" if static.loaded else "compiled the"
            say(f"{done} decoding step in {time.perf_counter() - start:.1f} s")
            return static
    if mode == "on" or reason.startswith("it did not compile"):  # auto's own choice of eager is not news
        say(f"decoding eagerly: {reason}")
    return None


def use_cache_folder() -> None:
    """Inductor's caches in ``$AIAYN_CACHE/inductor``, unless the user named a folder (TORCHINDUCTOR_CACHE_DIR)."""
    global _SET
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) in (default_cache_dir(), _SET):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _SET = str(cache_dir() / "inductor")


_SET = None  # the folder use_cache_folder set last


@torch.no_grad()  # as the engine steps (an inference-mode tensor would be another graph)
def warm_up(model, static: CompiledStep) -> None:
    """A step of each of ``static``'s kinds on a scratch cache of a two-token prompt (what every later step reuses):
    one token of one row, of two rows, two tokens of one row, through ``static`` itself (not attached yet)."""
    for kind in static.kinds:
        rows, columns = (2, 1) if kind == "rows" else (1, 2) if kind == "columns" else (1, 1)
        prompt = torch.full((rows, 2), model.config.eos_id, dtype=torch.long, device=next(model.parameters()).device)
        tokens, state = model.start(prompt, 3)
        model.step(tokens, state, last=True)  # a prompt: the eager step
        if static(model, torch.cat([tokens, tokens[:, -1:].repeat(1, columns)], dim=1), state) is None:
            raise RuntimeError(f"the static step does not take a step of {rows} row(s) of {columns} token(s)")
