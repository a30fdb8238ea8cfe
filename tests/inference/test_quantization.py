"""Reduced-precision inference: int8 and int4 (``aiayn.quantize``) and bfloat16 decode like float32 on a trained
model."""

import argparse
import random

import pytest
import torch

from aiayn import generate, quantize
from aiayn.cli.common import note_emulated_bf16
from aiayn.inference.translator import Translator
from aiayn.model import cpu
from aiayn.model.cpu import dense_available, native_bf16, packing_available
from aiayn.model.packed import PackedLinear
from aiayn.model.quantized import Int4Linear, Int8Linear

from conftest import kernels_expected, run_main


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8))) for _ in range(n)]


@pytest.fixture(scope="module")
def fp32(trained_run) -> Translator:
    return Translator.from_checkpoint(trained_run, beam_size=2, packed=False)


def _translates_like(fp32: Translator, low: Translator) -> None:
    texts = _sentences(60)
    reference, got = fp32.translate(texts), low.translate(texts)
    # of 60 the same as float32's, over 8 runs of the fixture's recipe (seeds 0-1, 1-2 threads, AVX512 and AVX2
    # kernels: benchmarks/bench_learning_spread.py --measures quantized): int8 55-60, int4 49-57; 4 under the lowest
    agree = 0.75 if any(isinstance(m, Int4Linear) for m in low.model.modules()) else 0.85
    assert sum(a == b for a, b in zip(reference, got, strict=True)) >= agree * len(texts)
    assert len(set(reference)) > 0.8 * len(texts)  # real, varied translations, so agreement means something


@pytest.mark.parametrize("options", [{"int4": True}, {"bf16": True}, {"bf16": True, "packed": False}])
def test_reduced_precision_translates_like_float32(trained_run, fp32, options, bf16_kernels):
    """int4's activations in bfloat16 or float32, as the CPU has bfloat16 kernels or not (both forced, on every
    machine); bfloat16 weights packed for oneDNN where the CPU has the instructions (only there: oneDNN refuses
    elsewhere), the plain model cast to bfloat16 otherwise (``packed=False`` takes that path on every machine)."""
    low = Translator.from_checkpoint(trained_run, beam_size=2, **options)
    packed_bf16 = any(isinstance(m, PackedLinear) and m.packed.dtype == torch.bfloat16 for m in low.model.modules())
    assert packed_bf16 == (options == {"bf16": True} and packing_available(torch.bfloat16))
    _translates_like(fp32, low)


@pytest.mark.parametrize("bf16", [False, True], ids=["int8", "int8-bf16"])
def test_int8_translates_like_float32_on_either_kind_of_cpu(trained_run, fp32, bf16, bf16_kernels):
    """int8 with bfloat16 activations where the CPU computes in bfloat16, with int8 activations where it does not:
    each branch forced, on every machine."""
    low = Translator.from_checkpoint(trained_run, beam_size=2, int8=True, bf16=bf16)
    layers = [m for m in low.model.modules() if isinstance(m, Int8Linear)]
    assert layers and all(layer.grouped or layer.w8a8 != bf16_kernels for layer in layers)
    _translates_like(fp32, low)


def test_quantize_makes_int8_linears_and_leaves_the_model_alone(fp32, bf16_kernels):
    """int8 layers on either kind of CPU (their activations differ); the caller's model stays float."""
    model = fp32.model
    kinds = {type(m) for m in quantize(model).modules()}
    assert Int8Linear in kinds and torch.nn.Linear not in kinds
    assert all(type(m) is not Int8Linear for m in model.modules())


def test_packed_translator_gives_the_plain_translations(trained_run, fp32):
    packed = Translator.from_checkpoint(trained_run, beam_size=2)
    assert any(isinstance(m, PackedLinear) for m in packed.model.modules())
    texts = _sentences(60, seed=2)
    assert packed.translate(texts) == fp32.translate(texts)


def test_bf16_cached_decoding_equals_uncached(fp32):
    model = fp32.model.to(torch.bfloat16)
    try:
        src = torch.tensor([fp32.source_ids(t) for t in _sentences(6, seed=1) if len(t) == 9] or [[5, 6, 7]])
        for strategy in ("greedy", "beam"):
            cached = generate(model, src, strategy, beam_size=3, max_new_tokens=12)
            uncached = generate(model, src, strategy, beam_size=3, max_new_tokens=12, use_cache=False)
            assert cached == uncached
        assert next(model.parameters()).dtype == torch.bfloat16
    finally:
        model.float()


def test_reduced_precision_translators_leave_the_callers_model_alone(fp32):
    for options in ({"int8": True}, {"int4": True}, {"bf16": True}, {"bf16": True, "packed": False}):
        translator = Translator(fp32.model, fp32.tokenizers, **options)
        assert translator.model is not fp32.model
        assert {p.dtype for p in fp32.model.parameters()} == {torch.float32}
        assert all(type(m) is not PackedLinear for m in fp32.model.modules())


def test_int8_with_int4_is_one_line_error(trained_run):
    result = run_main("translate", "--checkpoint", str(trained_run), "--int8", "--int4", stdin="a b c\n")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == ["aiayn: error: --int8 and --int4: choose one"]


def test_translate_command_with_bf16_int8_and_int4(trained_run, fp32):
    """Each flag decodes as the library does at that precision (the same translations, line for line), and close
    to float32 (the closeness per precision: ``test_reduced_precision_translates_like_float32``)."""
    texts = _sentences(8, seed=3)
    reference = fp32.translate(texts)
    for flag in ("--bf16", "--int8", "--int4"):
        result = run_main("translate", "--checkpoint", str(trained_run), "--beam-size", "2", flag,
                          stdin="\n".join(texts) + "\n")
        assert result.returncode == 0, result.stderr
        library = Translator.from_checkpoint(trained_run, beam_size=2, **{flag[2:]: True})
        assert result.stdout.splitlines() == library.translate(texts)
        assert sum(a == b for a, b in zip(result.stdout.splitlines(), reference, strict=True)) >= 4
        emulated = flag == "--bf16" and not native_bf16()  # this CPU's own answer
        noted = "aiayn: note: --bf16: this CPU has no bfloat16 instructions" in result.stderr
        assert noted == emulated, result.stderr


def test_bf16_is_noted_where_the_cpu_would_emulate_it(monkeypatch, capsys):
    """translate, evaluate and serve say so when --bf16 would decode slower than float32; nowhere else."""
    for kernels, bf16, device, noted in ((False, True, "cpu", True), (True, True, "cpu", False),
                                         (False, False, "cpu", False), (False, True, "cuda", False)):
        monkeypatch.setattr(cpu, "native_bf16", lambda kernels=kernels: kernels)
        note_emulated_bf16(argparse.Namespace(bf16=bf16, int8=False, int4=False, device=device))
        err = capsys.readouterr().err
        assert ("leave out --bf16 for speed" in err) == noted and len(err.splitlines()) == noted


TIED = "token table in int8, groups of 32 (the tied output projection's packed rows)"
OWN = "token table in int8, groups of 32 (Q8_0, its own)"


def test_kernels_name_the_path_each_precision_takes_on_either_kind_of_cpu(lm_run, bf16_kernels, monkeypatch):
    """``kernels`` (and ``aiayn generate --verbose``) say what the linear layers and token tables compute: the
    plain model PyTorch's matmul, the packed copy oneDNN's, int8 with int8 or bfloat16 activations, int4 through
    aiayn's int4 x int8 kernel where it builds, else with bfloat16 or float32 activations, as this CPU's branch
    chose (both branches forced on every machine); a quantized copy's table from its tied output, else Q8_0."""
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import inference_copy, kernels
    from aiayn.kernels import simd_path

    model = load_checkpoint(lm_run)[0].eval()
    n = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert kernels(model) == {"float32 weights, PyTorch's matmul": n}
    prompt = "bfloat16" if native_bf16() else "float32"
    if kernels_expected():
        ours = f"int4 weights x int8 activations, groups of 32 (aiayn::q4a8_mm, its {simd_path()} path; a prompt in "
        int8 = f"int8 weights x int8 activations, groups of 32 (aiayn::q8a8_mm, its {simd_path()} path; a prompt in "
        assert list(kernels(inference_copy(model, int4=True))) == [TIED, f"{ours}{prompt})", f"{int8}{prompt})"]
        assert list(kernels(inference_copy(model, int8=True))) == [TIED, f"{int8}{prompt})"]
    monkeypatch.setattr(cpu, "kernels_available", lambda: False)  # no compiler: PyTorch's kernels
    activations = "bfloat16" if bf16_kernels else "float32"
    theirs = ("int8 weights x bfloat16 activations (aten._weight_int8pack_mm)" if bf16_kernels
              else "int8 weights x int8 activations, integer products (torch._int_mm)")
    int4 = kernels(inference_copy(model, int4=True))
    assert list(int4) == [OWN, f"int4 weights x {activations} activations, groups of 32 "
                          "(aten._weight_int4pack_mm_for_cpu)", theirs]  # the output projection in int8
    assert list(kernels(inference_copy(model, int8=True))) == [OWN, theirs]
    if kernels_expected() and dense_available():  # a language model's float32 decoding through aiayn's own product
        words = (f"float32 weights, aiayn::f32_mm (its {simd_path()} path) for up to {cpu.F32_MM_ROWS} rows, "
                 "oneDNN's matmul")
        assert list(kernels(inference_copy(model, few_rows=True))) == [f"{words} for a prompt"]
    if packing_available():
        assert [path.split(",")[1] for path in kernels(inference_copy(model))] == [" oneDNN's packed matmul"]
    done = run_main("generate", "--checkpoint", str(lm_run), "--prompt", "ab", "--max-new-tokens", "2", "--int4",
                    "--verbose")
    assert done.returncode == 0 and "linear layer(s): int4 weights x" in done.stderr
    assert "1 table(s): token table in int8" in done.stderr
    assert "this CPU: native bfloat16" in done.stderr
