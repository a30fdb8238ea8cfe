"""Loading a checkpoint holds its weights once: read tensor by tensor into layers built without initialising their
weights, and for an inference copy converted layer by layer as they are read (``load_model(..., convert=)``): the
same model as converting after loading, and no float32 copy of the layers kept beside the converted ones."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from aiayn import DecoderOnly
from aiayn.inference.precision import converter, inference_copy, pack, quantize
from aiayn.model.build import load_model

from conftest import tiny

BIG = {"vocab_size": 256, "d_model": 512, "n_heads": 8, "d_ff": 2048, "n_decoder_layers": 8, "max_len": 64}


def lm_folder(folder, **overrides):
    torch.manual_seed(0)
    model = DecoderOnly(tiny(arch="decoder-only", positions="rope", **overrides)).eval()
    model.save(folder)
    return model


@pytest.mark.parametrize("how", ["int4", "int8", "packed"])
def test_converting_as_the_weights_are_read_equals_converting_after(tmp_path, how, bf16_kernels):
    lm_folder(tmp_path / "ckpt", d_model=64, d_ff=128, n_heads=4)
    after = {"int4": lambda m: quantize(m, 4), "int8": lambda m: quantize(m, 8), "packed": pack}[how](
        load_model(tmp_path / "ckpt"))
    read = load_model(tmp_path / "ckpt", convert=converter(**({} if how == "packed" else {how: True})))
    assert not any(type(m) is nn.Linear for m in read.modules())  # every layer converted, the output too
    assert inference_copy(read, own=True) is read  # a product takes it as it is
    ids = torch.randint(4, 40, (2, 9))
    with torch.no_grad():
        assert torch.equal(read(ids), after(ids))


PEAK = """
import sys
from aiayn.inference.precision import converter
from aiayn.model.build import load_model
def rss(key):
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(key))) * 1024
small, big, how = sys.argv[1:]
convert = converter(int4=True) if how == "int4" else None
model = load_model(small, convert=convert)  # what loading starts once (libraries, kernels) is paid here
del model
base = rss("VmRSS:")
model = load_model(big, convert=convert)
print(rss("VmHWM:") - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_loading_holds_the_weights_once_and_int4_never_holds_them_all_in_float32(tmp_path):
    """Peak memory above the interpreter's, in a process of its own: a plain load about the float32 weights once
    (before: twice, the file's copy and the model's), an int4 one well under them (before: more than twice; about
    half of them here: the int4 layers, one float32 layer at a time and its conversion)."""
    model = lm_folder(tmp_path / "big", **BIG)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # about 100 MB
    lm_folder(tmp_path / "small", d_model=64, d_ff=128, n_heads=4)
    peaks = {}
    for how in ("plain", "int4"):
        runs = []
        for _ in range(3):  # the least of three: the allocator's timing only adds (one int4 run: 55 to 78 MB)
            done = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path / "small"), str(tmp_path / "big"), how],
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            runs.append(int(done.stdout))
        peaks[how] = min(runs)
    assert peaks["plain"] < 1.4 * weights, (peaks, weights)
    assert peaks["int4"] < 0.75 * weights, (peaks, weights)
