"""What this CPU can do, probed in one place: every capability an inference copy, a training step or a note to the
user chooses by (oneDNN's bfloat16 and packing, native bfloat16 and exact int8 instructions, aiayn's kernels built
here, whether packing pays), and the row counts up to which each layer kind takes its few-rows kernel. Callers read
them through this module (``cpu.native_bf16()``), so a test forces a branch here once for every layer."""

from __future__ import annotations

import functools
import os
import statistics
import time

import torch
import torch.nn.functional as F

from aiayn.kernels import cpu_flags, load

F32_MM_ROWS = 8  # up to this many rows a call, a dense float32 layer's aiayn::f32_mm; above, oneDNN's (measured)
MATVEC_ROWS = 16  # up to this many rows a call, the int8 / int4 matrix-vector kernels; above, dequantized (measured)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16")  # x86's, then AArch64's


def bf16_kernels_available() -> bool:
    """oneDNN answers that it has bfloat16 kernels for this CPU (AVX512 BW/VL/DQ is enough: it converts, where
    :func:`native_bf16` CPUs compute in bfloat16). Packing bfloat16 weights needs them; speed needs native_bf16."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def native_bf16(flags: set[str] | None = None) -> bool:
    """This CPU computes in bfloat16 with its own instructions (``flags``, default this CPU's: AVX512-BF16, AMX-BF16,
    AVX-NE-CONVERT, or AArch64's BF16). oneDNN also offers bfloat16 on AVX512 CPUs without them, by conversion:
    on 2 cores of such an Intel Xeon a bf16 training step took 2.45x a float32 one and ``--int8`` with bfloat16
    activations answered "The capital of France is" with "The answer is: 2018-01-10". Elsewhere aiayn trains and
    runs its weight-only layers in float32 (``aiayn.model.quantized``)."""
    flags = cpu_flags() if flags is None else flags
    return bf16_kernels_available() and any(flag in flags for flag in BF16_FLAGS)


def exact_int8_dot(flags: set[str] | None = None) -> bool:
    """This CPU multiplies int8 by int8 into int32 exactly (AVX512-VNNI, AVX-VNNI or AMX-INT8). Without those
    instructions oneDNN sums pairs of products in 16 bits, which saturate for full-range int8 (its s8 x s8
    products were off by up to 34,420 with ``ONEDNN_MAX_CPU_ISA=AVX2``); 7-bit weights keep the pairs in range."""
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def packing_available(dtype: torch.dtype | None = None) -> bool:
    """oneDNN is in this PyTorch build (x86-64 and most AArch64 wheels); for bfloat16, this CPU also has oneDNN's
    bfloat16 kernels (``bf16_kernels_available``)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    return dtype != torch.bfloat16 or bf16_kernels_available()


def dense_available() -> bool:
    """A float32 :class:`~aiayn.model.packed.PackedLinear` may keep its weight dense: oneDNN is in this PyTorch (a
    prompt's product) and aiayn's kernels are built here (``aiayn::f32_mm``, decoding's)."""
    return packing_available() and load() is None


@functools.cache
def packing_pays() -> bool:
    """Whether oneDNN's prepacked float32 matmul beats PyTorch's plain one for decoding's matrix-vector products
    on this CPU, measured once a process (about 0.1 s: a 4,096 x 1,024 weight, larger than a core's cache, times one
    row, the two kernels taking turns; the medians compared). Packing was 2-2.5x faster on an AMD EPYC and 1.2x
    slower on an Intel Xeon with AMX, where the plain layers' compiled step also kept pace with llama.cpp
    (docs/decoding.md). ``$AIAYN_PACK`` (1 or 0) decides instead."""
    if os.environ.get("AIAYN_PACK") in ("0", "1"):
        return os.environ["AIAYN_PACK"] == "1"
    if not packing_available():
        return False
    weight, x = torch.randn(4096, 1024), torch.randn(1, 1024)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    kernels = (lambda: F.linear(x, weight), lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
    times: tuple[list[float], list[float]] = ([], [])
    with torch.inference_mode():
        for _ in range(7):
            for kernel, taken in zip(kernels, times, strict=True):
                kernel()
                start = time.perf_counter()
                for _ in range(4):
                    kernel()
                taken.append(time.perf_counter() - start)
    return statistics.median(times[1]) < statistics.median(times[0])


def kernel_dtype() -> torch.dtype:
    """The activations' dtype for the int4 kernel: bfloat16 where oneDNN has bfloat16 kernels, native or converted
    (in float32 the kernel is a scalar loop, 10-15x slower on an AVX512 EPYC), else float32."""
    return torch.bfloat16 if bf16_kernels_available() else torch.float32


def int8_activations() -> bool:
    """Whether :class:`Int8Linear` quantizes its activations on this CPU: where it has no native bfloat16
    (:func:`native_bf16`) but exact int8 dot products (:func:`exact_int8_dot`); elsewhere bfloat16 activations."""
    return not native_bf16() and exact_int8_dot()


def kernels_available() -> bool:
    """aiayn's int8-activation kernels (int4 and int8 weights) are built and loaded on this machine
    (:func:`aiayn.kernels.load`)."""
    return load() is None


def prompt_dtype() -> torch.dtype:
    """The dense product's dtype for a prompt's rows through aiayn's kernels' layers: bfloat16 where the CPU computes
    in it (:func:`native_bf16`), else float32."""
    return torch.bfloat16 if native_bf16() else torch.float32
