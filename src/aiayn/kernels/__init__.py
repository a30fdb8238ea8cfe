"""aiayn's own CPU kernels, compiled once per machine with its C++ compiler and loaded as ``torch.library`` ops.

Two (``matvec.cpp``), the matrix-vector products of batch-1 decoding with activations quantized to int8 per group
of 32: ``aiayn::q4a8_mm``, int4 weights (llama.cpp's Q4_1 x Q8_1 dot product), and ``aiayn::q8a8_mm``, int8
weights (its Q8_0 x Q8_0); ``aiayn::dequantize_q4`` / ``dequantize_q8``, the weights written out in one pass
for a prompt's dense product (``dequantize.cpp``); and ``aiayn::f32_mm``, float32 weights times a few float32 rows,
a float32 language model's decoding (``dense.cpp``; ``library.cpp`` registers the five, ``quant.h`` is what the
files share). :mod:`aiayn.kernels.quant` packs their weights and holds the same math in torch
operations (the reference the tests check them against). On 2 cores of an Intel Xeon, PyTorch's own int4
kernel read SmolLM2's weights from memory at about 8 GB/s, q4a8_mm at about 20 (docs/decoding.md). The library
is built with ``-march=native`` (its AVX512-VNNI, AVX2 or plain C++ path is the one this CPU has) into
``$AIAYN_CACHE/kernels/``, named by a digest of the source, PyTorch, the compiler, its flags and the CPU, so a
second start loads it in milliseconds. :func:`load` is the one point where they are built (a line on standard error
before and after, with the time it took); without a compiler, or where the build fails, it says why (in one line,
on standard error, for a failed build) and the caller keeps PyTorch's kernels. ``$AIAYN_KERNEL_FLAGS`` adds
compiler flags (``-mno-avx512f``: the AVX2 path on an AVX512 CPU; the tests force each path so).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from aiayn.io.files import atomic_path, cache_dir
from aiayn.kernels.quant import register_fake

SOURCES = sorted(Path(__file__).parent.glob("*.cpp"))  # compiled together into one library
HEADERS = sorted(Path(__file__).parent.glob("*.h"))
_STATE: dict[str, str | None] = {}  # "why": None once loaded, else why not; "path": the SIMD path compiled


def compiler() -> str | None:
    """The C++ compiler aiayn and Inductor use ($CXX, else g++, c++ or clang++ on PATH), or None."""
    return next((found for name in (os.environ.get("CXX"), "g++", "c++", "clang++")
                 if name and (found := shutil.which(name))), None)


def cpu_flags() -> set[str]:
    """This CPU's instruction-set features, as torch's cpuinfo probe names them (``torch.cpu.get_capabilities``)."""
    return {name for name, present in torch.cpu.get_capabilities().items() if present is True}


def _flags() -> list[str]:
    return ["-O3", "-march=native", *os.environ.get("AIAYN_KERNEL_FLAGS", "").split()]


def library_path(cxx: str) -> Path:
    """``$AIAYN_CACHE/kernels/quant-<digest>.so``: the digest of all the built library depends on."""
    sources = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in SOURCES + HEADERS}
    parts = {"source": sources, "torch": torch.__version__,
             "compiler": cxx, "flags": _flags(), "cpu": sorted(cpu_flags())}
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / "kernels" / f"quant-{digest}.so"


def _run(commands: list[list[str]]) -> None:
    """Run the compiler's commands side by side; a failure raises with its last line of errors."""
    running = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in commands]
    errors = [(p.communicate(timeout=600)[1] or "failed").strip() for p in running if p.wait(timeout=600)]
    if errors:
        raise RuntimeError(errors[0].splitlines()[-1] if errors[0] else "failed")


def _build(cxx: str, target: Path) -> None:
    """Compile the sources (each its own process) and link them into ``target`` (a temp file, then renamed: a
    reader never loads half a library)."""
    from torch.utils import cpp_extension

    target.parent.mkdir(parents=True, exist_ok=True)
    common = [cxx, *_flags(), "-fPIC", "-std=c++20", "-fopenmp", "-w"]
    with atomic_path(target) as tmp, tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        objects = [str(Path(scratch) / f"{source.stem}.o") for source in SOURCES]
        _run([[*common, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               *(f"-I{p}" for p in cpp_extension.include_paths()), "-c", str(source), "-o", obj]
              for source, obj in zip(SOURCES, objects, strict=True)])
        _run([[*common, "-shared", *objects, "-o", str(tmp),
               *(f"-L{p}" for p in cpp_extension.library_paths()), "-lc10", "-ltorch_cpu"]])


def load() -> str | None:
    """Build (once per machine) and load the kernels; None when ``torch.ops.aiayn.q4a8_mm`` and ``q8a8_mm`` are
    there to call, else why they are not (one line). Asked again, it answers from memory."""
    if "why" in _STATE:
        return _STATE["why"]
    cxx = compiler()
    if cxx is None:
        _STATE["why"] = "no C++ compiler (g++, c++ or clang++) on PATH"
        return _STATE["why"]
    target = library_path(cxx)
    try:
        if not target.is_file():  # the one point where they are built: said, with the time it took
            _say("building aiayn's CPU kernels for this machine (once; about 20 s) ...")
            start = time.perf_counter()
            _build(cxx, target)
            _say(f"built aiayn's CPU kernels in {time.perf_counter() - start:.1f} s")
        torch.ops.load_library(str(target))
        name = ctypes.CDLL(str(target)).aiayn_kernels_path
        name.restype = ctypes.c_char_p
        _STATE["path"] = name().decode()
        _STATE["why"] = None
        register_fake()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        _STATE["why"] = f"aiayn's int8-activation kernels did not build or load ({error})"
        _say(f"{_STATE['why']}: PyTorch's kernels are used instead")
    return _STATE["why"]


def _say(line: str) -> None:
    print(f"aiayn: {line}", file=sys.stderr, flush=True)


def simd_path() -> str | None:
    """The instruction set the loaded kernels were compiled for (avx512-vnni, avx2, c++), or None."""
    return _STATE.get("path") if load() is None else None
