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
from aiayn.io.rows import deferred_rows
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


@pytest.mark.parametrize("how, share, width", [("int4", "all", 64), ("int8", "none", 64), ("int4", "all", 48)])
def test_a_quantized_load_reads_a_large_table_a_block_of_rows_at_a_time_and_equals_converting_after(
        tmp_path, monkeypatch, how, share, width):
    """The token table (tied to the output projection or its own) and the output projection, over ``SLICE_BYTES``,
    are quantized from ``StoredRows`` a block of rows at a time: never read whole in float32, the same copy as
    quantizing after loading. A table quantize leaves as it is (a width that is not a multiple of 32) is read in
    full after all (``read_deferred``): nothing is left unread."""
    from aiayn.io import checkpoint, rows
    from aiayn.model.quantized import PACK_ROWS

    lm_folder(tmp_path / "ckpt", vocab_size=2500, d_model=width, d_ff=128, n_heads=4, share_embeddings=share)
    after = quantize(load_model(tmp_path / "ckpt"), 4 if how == "int4" else 8)
    blocks, getitem = [], rows.StoredRows.__getitem__
    for module in (checkpoint, rows):  # the layers' matrices too: only the model's own deferred
        monkeypatch.setattr(module, "SLICE_BYTES", 4096)
    monkeypatch.setattr(rows.StoredRows, "__getitem__",
                        lambda self, rows: blocks.append((self.name, rows)) or getitem(self, rows))
    read = load_model(tmp_path / "ckpt", convert=converter(**{how: True}))
    ids = torch.randint(4, 2500, (2, 9))
    with torch.no_grad():
        assert torch.equal(read(ids), after(ids))
    assert not any(deferred_rows(t) is not None for t in read.state_dict(keep_vars=True).values())
    names = {name for name, _ in blocks}
    if width % 32:  # the table stays a float one (the output projection int8 from rows): read whole after all
        assert type(read.embed.tokens).__name__ == "TokenEmbedding"
        assert torch.equal(read.embed.tokens.weight, after.embed.tokens.weight)
        return
    assert names == ({"embed.tokens.weight"} if share == "all" else
                     {"embed.tokens.weight", "output.weight"}), names
    for name in names:  # every row read once, a block at a time
        spans = [(r.start, min(r.stop, 2500)) for n, r in blocks if n == name]
        assert all(stop - start <= PACK_ROWS for start, stop in spans) and len(spans) == 3
        assert sorted(spans)[0][0] == 0 and sum(stop - start for start, stop in spans) == 2500


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


def peak(how: str, small, big) -> int:
    """The least of three peaks (bytes above the interpreter's) of loading ``big`` in a process of its own, ``how``
    plain or int4: the allocator's timing only adds (one int4 run: 55 to 78 MB)."""
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", PEAK, str(small), str(big), how],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(int(done.stdout))
    return min(runs)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_loading_holds_the_weights_once_and_int4_never_holds_them_all_in_float32(tmp_path):
    """Peak memory above the interpreter's, in a process of its own: a plain load about the float32 weights once
    (before: twice, the file's copy and the model's), an int4 one well under them (before: more than twice; about
    half of them here: the int4 layers, one float32 layer at a time and its conversion)."""
    model = lm_folder(tmp_path / "big", **BIG)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # about 100 MB
    lm_folder(tmp_path / "small", d_model=64, d_ff=128, n_heads=4)
    assert peak("plain", tmp_path / "small", tmp_path / "big") < 1.4 * weights, weights
    assert peak("int4", tmp_path / "small", tmp_path / "big") < 0.75 * weights, weights


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_an_int4_load_never_holds_a_large_token_table_in_float32(tmp_path):
    """A model that is mostly its tied token table (as Gemma 3's 262,144 rows are): the int4 load peaks near the
    table's 8 bits, a quarter of its float32 bytes (before: the float32 table and the int8 one, 1.3x them)."""
    model = lm_folder(tmp_path / "big", vocab_size=32768, d_model=256, n_heads=4, d_ff=512, n_decoder_layers=2)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # about 36 MB, the table 32
    lm_folder(tmp_path / "small", d_model=64, d_ff=128, n_heads=4)
    assert peak("int4", tmp_path / "small", tmp_path / "big") < 0.6 * weights, weights
