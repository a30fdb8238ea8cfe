"""aiayn::q4a8_mm and aiayn::q8a8_mm, int4 and int8 weights x int8 activations (src/aiayn/kernels/matvec.cpp), and
aiayn::dequantize_q4 / dequantize_q8 (a prompt's weights), against their math in torch operations
(aiayn.kernels.quant.reference_*, dequantize_*) on each SIMD path, and their packings."""

import os
import platform
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from aiayn.kernels import compiler, quant, simd_path

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
x86_only = pytest.mark.skipif(not X86, reason="-mno-avx512f and -mno-avx2 are x86 flags")


def _weights(n: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
    d = torch.rand(n, k // 32, generator=g) * 0.1 + 1e-3
    mn = torch.randn(n, k // 32, generator=g) * 0.5
    return q, d, mn


def test_the_int8_packing_is_undone_exactly_and_dequantizes_to_q_d():
    g = torch.Generator().manual_seed(1)
    q, d = torch.randint(-127, 128, (8, 64), dtype=torch.int8, generator=g), torch.rand(8, 2, generator=g)
    packed, scales = quant.pack_q8(q, d)
    assert packed.shape == (2, 2, 128) and packed.dtype == torch.int8 and scales.shape == (2, 2, 4)
    assert torch.equal(packed[1, 0, 32:64], q[5, :32])  # 4 rows' 32 bytes a group
    q2, d2 = quant.unpack_q8(packed, scales)
    assert torch.equal(q2, q) and torch.equal(d2, d.half().float())
    assert torch.equal(quant.dequantize_q8(packed, scales), (q.float().view(8, 2, 32) * d2[..., None]).view(8, 64))


def test_the_packing_is_undone_exactly_and_dequantizes_to_q_d_plus_mn():
    q, d, mn = _weights(12, 96)
    packed, scales = quant.pack_q4(q, d, mn)
    assert packed.shape == (3, 3, 64) and scales.shape == (3, 3, 8) and scales.dtype == torch.float16
    q2, d2, mn2 = quant.unpack_q4(packed, scales)
    assert torch.equal(q2, q) and torch.equal(d2, d.half().float()) and torch.equal(mn2, mn.half().float())
    # byte j of a row's group: weight j in the low nibble, j + 16 in the high (llama.cpp's Q4_1 block)
    assert int(packed[0, 1, 16 + 5]) == int(q[1, 32 + 5]) | int(q[1, 32 + 21]) << 4
    want = q.float().view(12, 3, 32) * d2[..., None] + mn2[..., None]
    assert torch.equal(quant.dequantize_q4(packed, scales), want.view(12, 96))


CHECK = """
import torch
from aiayn.kernels import load, quant, simd_path
assert load() is None, load()
for n, k, m in [(4, 32, 2), (40, 96, 1), (960, 576, 1), (64, 1536, 3), (8, 64, 16), (12, 64, 6)]:
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    d, mn = torch.rand(n, k // 32) * 0.1 + 1e-3, torch.randn(n, k // 32) * 0.5
    packed, scales = quant.pack_q4(q, d, mn)
    x = torch.randn(m, k) * 3
    x[0, :32] = 0  # a group of zeros: dx = 0
    got, want = torch.ops.aiayn.q4a8_mm(x, packed, scales), quant.reference_q4(x, packed, scales)
    assert got.shape == (m, n) and got.dtype == torch.float32
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 1e-5, ("int4", n, k, m, err)
    for dtype in (torch.float32, torch.bfloat16):  # a prompt's weights: q d + mn in float32, rounded once
        assert torch.equal(torch.ops.aiayn.dequantize_q4(packed, scales, dtype),
                           quant.dequantize_q4(packed, scales).to(dtype)), ("dequantize int4", n, k, dtype)
    q8 = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    q8[0, :5] = torch.tensor([-127, 127, 0, -1, 1], dtype=torch.int8)  # the extremes and the signs
    packed, scales = quant.pack_q8(q8, d)
    got, want = torch.ops.aiayn.q8a8_mm(x, packed, scales), quant.reference_q8(x, packed, scales)
    err = float((got - want).abs().max() / want.abs().max())
    assert got.shape == (m, n) and err < 1e-5, ("int8", n, k, m, err)
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(torch.ops.aiayn.dequantize_q8(packed, scales, dtype),
                           quant.dequantize_q8(packed, scales).to(dtype)), ("dequantize int8", n, k, dtype)
for n, k, m in [(5, 37, 1), (7, 100, 5), (960, 576, 1), (33, 1536, 4), (3, 16, 9), (1, 1, 2)]:  # tails of K, N, M
    w, x = torch.randn(n, k), torch.randn(m, k)
    got, want = torch.ops.aiayn.f32_mm(x, w), (x.double() @ w.double().T).float()
    assert got.shape == (m, n) and torch.allclose(got, want, rtol=1e-5, atol=1e-5 * k ** 0.5), ("float32", n, k, m)
print(simd_path())
"""


@pytest.mark.kernels
@pytest.mark.parametrize("flags, path", [  # the other paths built again, each about 20 s: make test-long
    ("", None), pytest.param("-mno-avx512f", "avx2", marks=[x86_only, pytest.mark.long]),
    pytest.param("-mno-avx2 -mno-avx512f", "c++", marks=[x86_only, pytest.mark.long])])
def test_the_kernel_equals_its_reference_on_each_simd_path(flags, path, tmp_path):
    """Each path compiled in a process of its own ($AIAYN_KERNEL_FLAGS; the default: this CPU's best, the library
    every other test loads, from the usual cache), its results within float rounding of the reference: the integer
    dots exact, the activations quantized alike."""
    env = {**os.environ, "AIAYN_KERNEL_FLAGS": flags, **({"AIAYN_CACHE": str(tmp_path)} if flags else {})}
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == (path or simd_path())


def test_the_reference_is_the_float_product_to_within_the_activations_rounding():
    """The math itself: dequantized weights times activations rounded to 8 bits per group of 32 (what llama.cpp's
    Q8_1 does): within half a step a group of the float product."""
    q, d, mn = _weights(16, 64, seed=3)
    packed, scales = quant.pack_q4(q, d, mn)
    weight = quant.dequantize_q4(packed, scales)
    x = torch.randn(2, 64)
    step = x.view(2, 2, 32).abs().amax(-1) / 127  # (M, G)
    bound = 0.5 * (step[:, None, :] * weight.view(16, 2, 32).abs().sum(-1)).sum(-1)  # (M, N)
    assert bool(((quant.reference_q4(x, packed, scales) - F.linear(x, weight)).abs() <= bound + 1e-5).all())


def test_without_a_compiler_the_kernel_says_why_and_int4_keeps_pytorchs(tmp_path):
    probe = ("import torch; from torch import nn; from aiayn.kernels import load; from aiayn.model.quantized import "
             "Int4Linear; print(load()); print(Int4Linear(nn.Linear(64, 16)).kernel)")
    env = {**os.environ, "PATH": str(tmp_path), "CXX": "", "AIAYN_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["no C++ compiler (g++, c++ or clang++) on PATH",
                                        done.stdout.splitlines()[1]]
    assert "_weight_int4pack_mm_for_cpu" in done.stdout.splitlines()[1]


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler on PATH to fail with")
@pytest.mark.parametrize("flags, named", [("-fno-such-flag-at-all", "no-such-flag"),
                                          pytest.param("-Wl,--no-such-option", "ld", marks=pytest.mark.long)])
# (the linker's refusal comes after every object is compiled: 18 s, make test-long)
def test_a_build_that_fails_says_why_in_one_line_and_leaves_no_library_or_objects(flags, named, tmp_path):
    """A compiler error (a flag it does not know) or a link error (the objects built, the linker refusing) is the
    caller's one-line reason to keep PyTorch's kernels; the cache's kernel folder is left empty (no half-linked
    library, no objects of the sources built apart)."""
    env = {**os.environ, "AIAYN_KERNEL_FLAGS": flags, "AIAYN_CACHE": str(tmp_path)}
    code = "from aiayn.kernels import load; print(load())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    why = done.stdout.strip()
    assert why.startswith("aiayn's int8-activation kernels did not build") and named in why, why
    assert "\n" not in why
    assert list((tmp_path / "kernels").iterdir()) == []
    said = [line for line in done.stderr.splitlines() if line.startswith("aiayn: ")]  # the build, declared
    assert said == ["aiayn: building aiayn's CPU kernels for this machine (once; about 20 s) ...",
                    f"aiayn: {why}: PyTorch's kernels are used instead"], done.stderr[-2000:]
