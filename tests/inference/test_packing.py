"""``aiayn.pack``: oneDNN-prepacked linear layers give the plain model's outputs, to float32 rounding."""

import copy

import pytest
import torch
from torch import nn

from aiayn import build_model, generate, pack, quantize
from aiayn.inference.precision import fuse, inference_copy
from aiayn.model import cpu
from aiayn.model.cpu import F32_MM_ROWS, dense_available, packing_available
from aiayn.model.packed import PackedLinear

from conftest import kernels_expected, random_ids, require_kernels, tiny


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only", "encoder-only"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rope"])
def test_packed_model_logits_equal_the_plain_model(arch, positions):
    model = build_model(tiny(arch=arch, positions=positions, dropout=0.0)).eval()
    packed = pack(model)
    src, tgt = random_ids(3, 7), random_ids(3, 5)
    with torch.no_grad():
        args = (src, tgt) if arch == "encoder-decoder" else (src,)
        torch.testing.assert_close(packed(*args), model(*args), atol=1e-5, rtol=1e-5)
    assert sum(isinstance(m, PackedLinear) for m in packed.modules()) == sum(
        isinstance(m, nn.Linear) for m in fuse(copy.deepcopy(model)).modules())  # Q, K, V fused first
    assert not any(isinstance(m, nn.Linear) for m in packed.modules())


def test_packing_copies_and_leaves_the_model_alone():
    model = build_model(tiny()).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pack(model)
    assert all(type(m) is not PackedLinear for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("dense", [True, False])
def test_packed_linear_takes_any_leading_shape_and_no_bias(dense):
    """Dense (aiayn::f32_mm up to F32_MM_ROWS rows, then oneDNN on the dense weight) or oneDNN-packed: nn.Linear's
    results for one row, a few, and a prompt's many."""
    if dense:
        require_kernels()
        assert dense_available()
    for bias in (True, False):
        linear = nn.Linear(40, 24, bias=bias)
        packed = PackedLinear(linear, dense=dense)
        assert packed.dense is dense and (packed.weight is not None) is dense
        for shape in [(1, 40), (5, 40), (2, 3, 40), (F32_MM_ROWS + 1, 40), (3, 7, 40)]:
            x = torch.randn(*shape)
            with torch.no_grad():
                got = packed(x)
            torch.testing.assert_close(got, linear(x), atol=1e-5, rtol=1e-5)
            if dense and x.numel() // 40 <= F32_MM_ROWS:  # a few rows: aiayn::f32_mm's own result, bit for bit
                own = torch.ops.aiayn.f32_mm(x.reshape(-1, 40), linear.weight.detach()).view(*shape[:-1], 24)
                assert torch.equal(got, own if linear.bias is None else own + linear.bias.detach())


def test_packed_generation_equals_plain_generation_with_and_without_cache():
    torch.manual_seed(0)
    model = build_model(tiny(dropout=0.0)).eval()
    packed, src = pack(model), random_ids(4, 6)
    for strategy in ("greedy", "beam"):
        expected = generate(model, src, strategy, beam_size=3, max_new_tokens=10)
        assert generate(packed, src, strategy, beam_size=3, max_new_tokens=10) == expected
        assert generate(packed, src, strategy, beam_size=3, max_new_tokens=10, use_cache=False) == expected


def test_bfloat16_packing_is_close_to_float32():
    """Packed where the CPU has oneDNN's bf16 kernels; elsewhere ``pack`` refuses in one line and the inference
    copy is the plain model in bf16: close to float32 either way."""
    model = build_model(tiny(dropout=0.0)).eval()
    if packing_available(torch.bfloat16):
        low = pack(model, torch.bfloat16)
        assert any(isinstance(m, PackedLinear) for m in low.modules())
    else:
        with pytest.raises(RuntimeError, match="no oneDNN bfloat16 kernels"):
            pack(model, torch.bfloat16)
        low = inference_copy(model, bf16=True)
        assert not any(isinstance(m, PackedLinear) for m in low.modules())
    src, tgt = random_ids(2, 7), random_ids(2, 5)
    with torch.no_grad():
        got, want = low(src, tgt), model(src, tgt)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - want).abs().max()) < 0.05 * float(want.abs().max())


def test_packing_twice_or_quantizing_a_packed_model_is_a_clear_error():
    packed = pack(build_model(tiny()))
    for convert in (pack, quantize):
        with pytest.raises(ValueError, match="already packed"):
            convert(packed)


def test_float32_is_packed_only_where_packing_pays_and_otherwise_fused_with_the_same_logits(monkeypatch):
    """``inference_copy`` in float32 for a few rows at a time (``few_rows``: a language model's decoding) keeps its
    weights dense for aiayn::f32_mm where aiayn's kernels build; otherwise (a translator's batches, or no kernels)
    it packs where oneDNN's prepacked matmul measured faster (``packing_pays``), else keeps PyTorch's layers,
    fused: the same logits every way. ``$AIAYN_PACK`` decides instead of the measure."""
    model = build_model(tiny(dropout=0.0)).eval()
    src, tgt = random_ids(2, 7), random_ids(2, 5)
    if kernels_expected() and dense_available():
        low = inference_copy(model, few_rows=True)
        assert all(m.dense for m in low.modules() if isinstance(m, PackedLinear))
        assert low.output.packed is None  # tied: the token table's tensor, no second layout beside it
        assert low.output.weight.data_ptr() == low.tgt_embed.tokens.weight.data_ptr()
        with torch.no_grad():
            torch.testing.assert_close(low(src, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)
        assert not any(getattr(m, "dense", False) for m in inference_copy(model).modules())  # many rows: packed
    monkeypatch.setattr(cpu, "dense_available", lambda: False)
    measured = cpu.packing_pays  # the probe itself, forced below
    for pays in (True, False):
        monkeypatch.setattr(cpu, "packing_pays", lambda pays=pays: pays)
        for few_rows in (False, True):  # without aiayn's kernels, few rows or many
            low = inference_copy(model, few_rows=few_rows)
            kinds = {type(m) for m in low.modules()}
            assert (PackedLinear in kinds) == (pays and packing_available())
            assert not any(getattr(m, "dense", False) for m in low.modules())
            assert any(getattr(m, "qkv_proj", None) is not None for m in low.modules())  # fused either way
            with torch.no_grad():
                torch.testing.assert_close(low(src, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)
    for value, want in (("1", True), ("0", False)):
        monkeypatch.setenv("AIAYN_PACK", value)
        measured.cache_clear()
        assert measured() is want
    monkeypatch.delenv("AIAYN_PACK")
    measured.cache_clear()
    assert measured() in (True, False)  # measured here
    measured.cache_clear()
