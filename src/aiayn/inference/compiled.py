"""The decoding step compiled once: ``model/static.py``'s step (shapes that do not change from token to token)
through ``torch.compile`` (Inductor, ``fullgraph``, its C++ wrapper), attached to a language model so that its
``step`` takes the compiled graph at batch 1 and the eager path everywhere else.

One graph serves every position and every cache size: the cache column is a tensor and the caches' capacity is
marked dynamic, so a generation never recompiles. Inductor's caches live in aiayn's cache folder
(``$AIAYN_CACHE/inductor``): the first compile on a machine takes about a minute, later starts reuse it.
``--compile auto|on|off`` (``aiayn generate``, ``chat``, ``serve``): auto compiles where a C++ compiler is
present, on the CPU, an ``--int8`` or ``--int4`` model large enough to gain (``AUTO_PARAMETERS``) for a session or
a long generation (``AUTO_TOKENS``); anything else decodes eagerly, with one line saying why (under ``on``, or
after a failed compile).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor
from torch._inductor import config as inductor_config
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
from torch.fx.experimental import _config as fx_config

from aiayn.io.files import cache_dir
from aiayn.model.packed import PackedLinear
from aiayn.model.quantized import Int4Linear, Int8Linear
from aiayn.model.state import DecodeState
from aiayn.model.static import advance, static_inputs, static_step

MODES = ("auto", "on", "off")
AUTO_PARAMETERS = 100_000_000  # below this auto decodes eagerly: a minute's first compile outweighs the gain
AUTO_TOKENS = 2_000  # a warm start's compile (~8 s) over what each token saves (int4 SmolLM2: 12.7 -> 8.4 ms)


class CompiledStep:
    """``model``'s :func:`~aiayn.model.static.static_step` compiled (or as it is, ``compiled=False``: the reference
    the tests hold it to), called by ``DecoderOnly.step`` for the steps it computes
    (:func:`~aiayn.model.static.static_inputs`) of one row."""

    def __init__(self, model, compiled: bool = True, freezing: bool = False) -> None:
        """``freezing``: the weights folded into the graph as constants (Inductor lowers oneDNN's packed linear
        layers only so; it is not cached on disk, so the other layers go without)."""
        self.compiled, self.freezing = compiled, freezing
        self.warm = False  # compiled once: the guards that tell graphs apart alone are checked (one graph here)
        step = functools.partial(static_step, model)  # the weights the graph's, not its inputs
        self.fn = step if not compiled else torch.compile(step, fullgraph=True, dynamic=False,
                                                          options={"cpp_wrapper": True})

    def __call__(self, model, tokens: Tensor, state: DecodeState) -> Tensor | None:
        """Logits (1, 1, V) of the next position, the caches written and advanced; None where it does not apply
        (the model then steps eagerly)."""
        inputs = static_inputs(model, tokens, state)
        if inputs is None or inputs[0].size(0) != 1:
            return None
        new, left_pad, kv = inputs
        column = torch.tensor([state.position], device=new.device)
        windows = [layer.self_kv.window for layer in state.cache.layers]
        args = (new.flatten()[:, None], column, left_pad, kv, windows)  # tokens (1, 1), their strides fixed
        if not self.warm:
            logits = self._compiling(args)
        else:
            try:
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    logits = self.fn(*args)
            except RuntimeError as error:  # inputs no graph was made for (inference-mode tensors): one more graph
                if "skip_guard_eval_unsafe" not in str(error):
                    raise
                logits = self._compiling(args)
        self.warm = self.compiled
        advance(state.cache)
        return logits

    def _compiling(self, args: tuple) -> Tensor:
        """A call that may compile, every guard checked: the caches' capacity marked dynamic (one graph for every
        capacity; a compiled graph then takes any), freezing set as asked (read when compiling, not from options)."""
        if self.compiled:
            for t in args[3]:
                torch._dynamo.maybe_mark_dynamic(t, 2)
        with inductor_config.patch(freezing=self.freezing):
            return self.fn(*args)


def why_eager(model, mode: str, device: torch.device | str = "cpu", tokens: int | None = None) -> str | None:
    """Why ``model`` decodes eagerly under ``--compile mode`` on ``device``; None: it is compiled. ``tokens``: the
    new tokens one run makes (``aiayn generate``); None: a session that lasts (chat, a server)."""
    if mode not in MODES:
        raise ValueError(f"--compile: one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return "--compile off"
    if model.config.arch != "decoder-only" or model.decoder.position_bias is not None:
        return "only a decoder-only model without a relative position bias has a compiled step"
    if getattr(model, "tensor_parallel", 1) > 1 or model.adapter_rows is not None:
        return "a model split over processes or serving LoRA adapters steps eagerly"
    if torch.device(device).type != "cpu":
        return f"the compiled step is built for the CPU, not {torch.device(device).type}"
    if compiler() is None:
        return "no C++ compiler (g++, c++ or clang++) on PATH: install one to compile"
    if mode == "auto":
        quantized = [m for m in model.modules() if isinstance(m, Int8Linear | Int4Linear)]
        size = sum(p.numel() for p in model.parameters()) + sum(m.in_features * m.out_features for m in quantized)
        if size < AUTO_PARAMETERS:
            return f"--compile auto: {size / 1e6:.0f}M parameters, below the {AUTO_PARAMETERS // 10**6}M where it gains"
        if tokens is not None and tokens < AUTO_TOKENS:
            return (f"--compile auto: {tokens} new tokens, fewer than the {AUTO_TOKENS:,} that repay a start's compile "
                    "(--compile on)")
        if not quantized:
            return ("--compile auto compiles --int8 and --int4 models: a float model's graph holds its packed weights "
                    "(Inductor's freezing), which is not cached, so every start would compile again (--compile on)")
    return None


def compiler() -> str | None:
    """The C++ compiler Inductor would use ($CXX, else g++, c++ or clang++ on PATH), or None."""
    return next((found for name in (os.environ.get("CXX"), "g++", "c++", "clang++")
                 if name and (found := shutil.which(name))), None)


def attach(model, mode: str = "auto", device: torch.device | str = "cpu",
           say: Callable[[str], None] | None = None, tokens: int | None = None) -> bool:
    """Compile ``model``'s decoding step under ``--compile mode`` and attach it (``model.static``), compiling at
    once on a scratch cache (a progress line, then the time it took); where it cannot, the model decodes eagerly
    and ``say`` (default: standard error, after ``aiayn:``) gets one line saying why, under ``on`` or after a
    compile that failed (``tokens`` as :func:`why_eager` takes it). Returns whether it is compiled."""
    say = say or (lambda line: print(f"aiayn: {line}", file=sys.stderr, flush=True))
    reason = why_eager(model, mode, device, tokens)
    if reason is None:
        use_cache_folder()
        fx_config.use_duck_shape = False  # caches of equal sizes (a short text's ring and
        # its full layers) still get a size each: a later, longer text's do not recompile
        say(f"compiling the decoding step (cached in {os.environ['TORCHINDUCTOR_CACHE_DIR']}: about a minute the "
            "first time on this machine) ...")
        packed = any(isinstance(m, PackedLinear) for m in model.modules())
        start, model.static = time.perf_counter(), CompiledStep(model, freezing=packed)
        try:
            warm_up(model)
        except Exception as error:  # any failure to compile leaves the eager step, said in one line
            model.static = None
            reason = f"it did not compile ({type(error).__name__}: {str(error).strip().splitlines()[0][:200]})"
        else:
            say(f"compiled the decoding step in {time.perf_counter() - start:.1f} s")
            return True
    model.static = None
    if mode == "on" or reason.startswith("it did not compile"):  # auto's own choice of eager is not news
        say(f"decoding eagerly: {reason}")
    return False


def use_cache_folder() -> None:
    """Inductor's caches in ``$AIAYN_CACHE/inductor``, unless the user named a folder (TORCHINDUCTOR_CACHE_DIR)."""
    global _SET
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) in (default_cache_dir(), _SET):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _SET = str(cache_dir() / "inductor")


_SET = None  # the folder use_cache_folder set last


@torch.no_grad()  # as the engine steps (an inference-mode tensor would be another graph)
def warm_up(model) -> None:
    """One compiled step on a scratch cache of a two-token prompt (what every later step reuses)."""
    prompt = torch.full((1, 2), model.config.eos_id, dtype=torch.long, device=next(model.parameters()).device)
    tokens, state = model.start(prompt, 2)
    model.step(tokens, state, last=True)
    model.step(torch.cat([tokens, tokens[:, -1:]], dim=1), state, last=True)
