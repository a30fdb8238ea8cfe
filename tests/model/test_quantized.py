"""Weight-only int8 and int4 layers (``aiayn.model.quantized``): each packed layer against its dequantised float32
reference, to its quantisation error; the fused projections (``aiayn.inference.precision.fuse``)."""

import copy
import os
import subprocess
import sys
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiayn import build_model, generate, quantize
from aiayn.inference.precision import fuse
from aiayn.model import cpu
from aiayn.model.cpu import MATVEC_ROWS
from aiayn.model.lora import apply_lora
from aiayn.model.quantized import Int4Linear, Int8Linear
from aiayn.model.quantized_embedding import QuantizedEmbedding

from conftest import assert_runs_its_kernel, random_ids, require_kernels, tiny

LLAMA_LIKE = dict(arch="decoder-only", positions="rope", rope_layout="halves", n_kv_heads=2, feed_forward="swiglu",
                  norm_type="rmsnorm", norm="pre", qkv_bias=False, out_bias=False, ffn_bias=False)


def _activation_rounding(x: torch.Tensor, weight: torch.Tensor, bf16: bool, int8: bool = False) -> float:
    """A bound on what bfloat16 (8-bit mantissa) activations and dequantised weights, or int8 activations (half a
    step of max|x_row| / 127 each), can move x W^T by."""
    if int8:
        return float((x.abs().amax(1, keepdim=True) / 254 * weight.abs().sum(1)).max()) + 1e-4
    if not bf16:
        return 1e-4
    return float(2 ** -7 * (x.abs() @ weight.abs().t()).max()) + 1e-4  # x and, for many rows, W rounded


@pytest.mark.parametrize("make", [Int8Linear, partial(Int8Linear, grouped=False), Int4Linear,
                                  partial(Int4Linear, w4a8=False)],
                         ids=["int8", "int8-pytorch-kernels", "int4", "int4-pytorch-kernel"])
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_layer_equals_its_dequantised_reference(make, bias, bf16_kernels):
    """int8 and int4 (aiayn's int4 x int8 kernel where it builds, and PyTorch's bfloat16 or float32 one), a few rows
    through the kernel and many through the dequantized weight, each within its activations' rounding."""
    if make in (Int8Linear, Int4Linear):  # the default: aiayn's kernels, which must then be there
        require_kernels()
    torch.manual_seed(0)
    linear = nn.Linear(64, 40, bias=bias)
    layer = make(linear)
    weight = layer.dequantized()  # (40, 64), float32
    assert weight.shape == linear.weight.shape
    int8 = getattr(layer, "w8a8", False) and not getattr(layer, "grouped", False)  # every row's activations
    ours = getattr(layer, "w4a8", False) or getattr(layer, "grouped", False)  # int8 activations for a few rows
    assert ours == (make in (Int8Linear, Int4Linear))
    if ours:
        assert_runs_its_kernel(layer)
    for shape in [(1, 64), (3, 64), (2, 1, 64), (MATVEC_ROWS + 5, 64)]:  # the kernel's rows and the dequantised path
        x = torch.randn(*shape)
        want = F.linear(x, weight, linear.bias).detach()
        got = layer(x)
        assert got.shape == want.shape and got.dtype == torch.float32
        few = x.numel() // 64 <= MATVEC_ROWS
        bf16 = layer.dtype == torch.bfloat16 and not (few and ours)
        bound = _activation_rounding(x.view(-1, 64), weight, bf16, int8 or (few and ours))
        assert float((got - want).abs().max()) <= bound
    if not getattr(layer, "grouped", True):  # PyTorch's int8: int8 activations without bf16
        assert layer.w8a8 == (not bf16_kernels)


LAYOUT_PROBE = """
import torch
from torch import nn
from aiayn.model import quantized
for n, k in [(40, 64), (200, 96), (1100, 64)]:  # a partial block only; blocks and a tail; two PACK_ROWS blocks
    linear = nn.Linear(k, n)
    layer = quantized.Int4Linear(linear, w4a8=False)  # PyTorch's kernel, whose packing this is
    layouts, quantized.LAYOUTS = quantized.LAYOUTS, ()
    kept = quantized.Int4Linear(linear, w4a8=False)  # no layout known: the second copy kept, as before
    quantized.LAYOUTS = layouts
    assert layer.nibbles is None and kept.nibbles is not None and kept.layout is None, (n, k, layer.layout)
    assert torch.equal(layer.dequantized(), kept.dequantized()), (n, k)
    x = torch.randn(40, k)  # a prompt's rows: through the weights dequantized
    assert torch.equal(layer(x), kept(x)), (n, k)
print(torch.backends.cpu.get_cpu_capability(), layer.layout)
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_int4_keeps_one_copy_of_its_weights_in_the_kernels_packing_on_every_cpu_path(capability):
    """The int4 kernel packs its bytes one way per CPU path (AVX512: blocks of 64 rows, AVX2: of 32, rows c and
    c + 32 or c + 16 in a byte; neither: rows 2j and 2j + 1); ``Int4Linear`` recognises the one it packed with and
    reads its weights back from that packing (``dequantized``, a prompt's path), keeping no second copy, with the
    same weights and outputs as with the copy. Each path forced in a process of its own (``ATEN_CPU_CAPABILITY``;
    a CPU without it runs the highest it has, which must hold too)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run([sys.executable, "-c", LAYOUT_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_int8_weights_are_within_half_a_step_of_the_float_ones():
    torch.manual_seed(1)
    linear = nn.Linear(96, 32)
    layer = Int8Linear(linear)
    step = linear.weight.abs().amax(dim=1, keepdim=True) / 127  # (N, 1)
    error = (layer.dequantized() - linear.weight).abs()
    assert bool((error <= step / 2 + 1e-6).all())
    assert float(error.max()) > 0  # it is quantised


def test_int4_weights_are_within_half_a_step_of_their_group(bf16_kernels):
    torch.manual_seed(2)
    linear = nn.Linear(128, 48, bias=False)
    layer = Int4Linear(linear, group_size=32)
    groups = linear.weight.detach().view(48, 4, 32)
    step = (groups.amax(-1, keepdim=True) - groups.amin(-1, keepdim=True)) / 15  # (N, K/G, 1)
    error = (layer.dequantized().view(48, 4, 32) - groups).abs()
    largest = groups.abs().amax(-1, keepdim=True)
    kept = 2 ** -8 * (8 * step + 2 * largest) if bf16_kernels else 0  # scales and offsets held in bfloat16
    if layer.w4a8:  # aiayn's kernel: in float16 (11 significant bits), whatever the CPU
        kept = 2 ** -11 * (16 * step + 2 * largest)
    assert bool((error <= step / 2 + kept + 1e-5).all())
    assert len(torch.unique(layer.dequantized()[0, :32])) <= 16  # 4 bits: at most 16 values a group


def test_int4_refuses_a_width_that_is_not_a_multiple_of_the_group_and_quantize_makes_such_a_layer_int8():
    with pytest.raises(ValueError, match="not a multiple of the group size 32"):
        Int4Linear(nn.Linear(48, 16))
    model = build_model(tiny(**LLAMA_LIKE, d_ff=48)).eval()  # the MLP's down projection reads 48 features
    low = quantize(model, 4)
    assert {type(m.down_proj) for m in low.modules() if hasattr(m, "down_proj")} == {Int8Linear}
    assert sum(type(m) is Int4Linear for m in low.modules()) == 3 * 2  # QKV, W_O, gate-up (2 layers)
    assert type(low.output) is Int8Linear  # the output projection in 8 bits, as llama.cpp keeps it
    with torch.no_grad():
        assert torch.isfinite(low(random_ids(1, 5))).all()


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_model_is_close_to_float_and_decodes_the_same_with_and_without_cache(bits, bf16_kernels):
    torch.manual_seed(3)
    model = build_model(tiny(**LLAMA_LIKE)).eval()
    low = quantize(model, bits)
    kinds = {type(m) for m in low.modules()}
    assert (Int4Linear if bits == 4 else Int8Linear) in kinds and nn.Linear not in kinds
    ids = random_ids(2, 9)
    with torch.no_grad():
        got, want = low(ids), model(ids)
    assert float((got - want).abs().max()) < (0.05 if bits == 8 else 0.25) * float(want.abs().max())
    cached = generate(low, ids, "greedy", max_new_tokens=8)
    assert cached == generate(low, ids, "greedy", max_new_tokens=8, use_cache=False)
    assert all(type(m) is not Int8Linear for m in model.modules())  # the caller's model untouched


@pytest.mark.parametrize("config", [LLAMA_LIKE, dict(arch="encoder-decoder")], ids=["llama-like", "paper"])
def test_fused_projections_give_the_unfused_logits(config):
    torch.manual_seed(4)
    model = build_model(tiny(**config)).eval()
    fused = fuse(copy.deepcopy(model))
    attentions = [m for m in fused.modules() if hasattr(m, "qkv_proj")]
    assert any(a.qkv_proj is not None for a in attentions)
    assert any(a.qkv_proj is None for a in attentions) == (config["arch"] == "encoder-decoder")  # cross-attention
    ids, tgt = random_ids(2, 7), random_ids(2, 5)
    args = (ids, tgt) if config["arch"] == "encoder-decoder" else (ids,)
    with torch.no_grad():
        torch.testing.assert_close(fused(*args), model(*args), atol=1e-5, rtol=1e-5)
    assert generate(fused, ids, "greedy", max_new_tokens=6) == generate(model, ids, "greedy", max_new_tokens=6)


def test_lora_wrapped_projections_stay_apart():
    model = build_model(tiny(**LLAMA_LIKE)).eval()
    apply_lora(model, r=2, alpha=4.0, targets="q,k,v,o")
    fuse(model)
    assert all(m.qkv_proj is None for m in model.modules() if hasattr(m, "qkv_proj"))
    assert any(getattr(m, "gate_up_proj", None) is not None for m in model.modules())  # the MLP is not wrapped


def test_fusing_draws_nothing_from_torchs_random_generator():
    """Validation during training decodes through a fused copy: fusing must leave the training's random stream
    (dropout masks, shuffling) as it was."""
    model = build_model(tiny(**LLAMA_LIKE)).eval()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    fuse(copy.deepcopy(model))
    assert torch.equal(torch.rand(3), expected)


def test_bfloat16_is_native_only_with_the_instructions_that_compute_in_it():
    """oneDNN offers bfloat16 on any AVX512 CPU (by conversion); aiayn trains and runs its int8 layers in bfloat16
    only where the CPU has AVX512-BF16, AMX-BF16, AVX-NE-CONVERT or AArch64's BF16 (decided from its flags)."""
    from aiayn.model.cpu import bf16_kernels_available, exact_int8_dot, native_bf16

    if not bf16_kernels_available():
        assert not native_bf16({"avx512_bf16"})  # no oneDNN bfloat16 at all: nothing is native
        return
    assert not native_bf16({"avx2", "avx512_f", "avx512_bw", "avx512_vnni"})  # an AVX512 Xeon without bf16
    assert not native_bf16({"avx2", "fma3"})  # an AVX2-only EPYC
    for flag in ("avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16"):
        assert native_bf16({"avx2", flag}), flag
    assert Int8Linear(nn.Linear(32, 8), grouped=False).w8a8 == (not native_bf16() and exact_int8_dot())  # the CPU's
    assert exact_int8_dot({"avx512_vnni"}) and exact_int8_dot({"avx_vnni"}) and not exact_int8_dot({"avx2"})


def test_int8_activations_without_exact_int8_dots_take_two_products_with_the_same_result(monkeypatch):
    """Without VNNI or AMX oneDNN sums pairs of int8 products in 16 bits, which saturate for full-range weights:
    there q = 2 h + l goes as two products with small weights, equal to the one product where dots are exact."""
    from aiayn.model import cpu

    torch.manual_seed(6)
    linear, x = nn.Linear(96, 40), torch.randn(5, 96) * 3
    layer = Int8Linear(linear, w8a8=True)
    step = x.abs().amax(1, keepdim=True) / 127
    p = (x / step).round().to(torch.int8)
    exact = (p.int() @ layer.q.int().t()).float() * step * layer.scale + linear.bias  # the integer product, exactly
    monkeypatch.setattr(cpu, "exact_int8_dot", lambda: False)
    split = Int8Linear(linear, w8a8=True)
    high, low = split.halves
    assert int(high.max()) <= 63 and int(high.min()) >= -64 and set(low.unique().tolist()) <= {0, 1}
    assert torch.equal(2 * high + low, split.q)
    torch.testing.assert_close(split(x), exact.detach(), rtol=1e-6, atol=1e-5)


def _float_tables(model: nn.Module, rows: int) -> list[str]:
    """Where ``model`` holds a floating tensor of at least ``rows`` rows: its parameters, buffers and the tensors
    its layers keep as attributes (the quantized layers' packings)."""
    found = []
    for name, module in model.named_modules():
        tensors = {**module._parameters, **module._buffers,
                   **{k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor)}}
        found += [f"{name}.{k}" for k, t in tensors.items()
                  if t is not None and t.is_floating_point() and t.dim() == 2 and t.size(0) >= rows]
    return found


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("ours", [True, False], ids=["aiayns-kernels", "pytorchs-kernels"])
def test_a_quantized_copy_looks_its_tokens_up_in_8_bits_and_keeps_no_float_table(bits, ours, monkeypatch):
    """int8 and int4 copies alike: tied to an output on aiayn's packing (int8, groups of 32: int4 keeps its output
    in 8 bits), the table is that layer's rows, read in place and equal to what the output multiplies by; else it
    is quantized alone, Q8_0: within half a step of each group of the float table."""
    if ours:
        require_kernels()
    monkeypatch.setattr(cpu, "kernels_available", lambda: ours)
    torch.manual_seed(5)
    model = build_model(tiny(**LLAMA_LIKE, vocab_size=203)).eval()  # 203 rows: the packing pads to 204
    low = quantize(model, bits)
    table = low.embed.tokens
    assert isinstance(table, QuantizedEmbedding) and not _float_tables(low, 203)
    assert type(low.output) is Int8Linear
    ids = torch.tensor([[0, 1, 2, 3, 4, 101, 202], [5, 6, 7, 199, 200, 201, 202]])
    with torch.no_grad():
        got, want = table(ids), model.embed.tokens(ids)  # (2, 7, D): the float table times sqrt(d_model)
    assert table.tied == (ours and low.output.grouped)
    if table.tied:
        assert table.packed.data_ptr() == low.output.packed.data_ptr()
        torch.testing.assert_close(got, low.output.dequantized()[ids] * table.scale, rtol=1e-6, atol=1e-6)
    groups = model.embed.tokens.weight.detach()[ids].view(2, 7, -1, 32)  # (2, 7, G, 32)
    step = groups.abs().amax(-1, keepdim=True) / 127 * table.scale  # (2, 7, G, 1): one int8 step
    assert bool(((got - want).view(groups.shape).abs() <= step * 0.501 + 1e-7).all())
    assert float((got - want).abs().max()) > 0  # quantized, not the float table
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 203\)"):
        table(torch.tensor([[3, 203]]))


def test_source_and_target_share_one_quantized_table_as_they_shared_the_float_one():
    model = build_model(tiny(arch="encoder-decoder", share_embeddings="all")).eval()
    low = quantize(model, 8)
    assert isinstance(low.src_embed.tokens, QuantizedEmbedding) and low.src_embed.tokens is low.tgt_embed.tokens
    assert not _float_tables(low, 40)
