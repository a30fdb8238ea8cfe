"""The checkpoint layer: atomic files and folders, recovery after a kill, resolving, damaged files."""

import json

import pytest
import torch

from aiayn import EncoderDecoder, load_model
from aiayn.io.files import atomic_directory, atomic_path, atomic_write_text, read_json, recover
from aiayn.io.run import resolve_checkpoint

from conftest import tiny


def test_atomic_file_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "first\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "first\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with atomic_path(tmp_path / "fig.png") as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path  # same folder, same suffix (format by name)
        tmp.write_bytes(b"png")
    assert (tmp_path / "fig.png").read_bytes() == b"png"


def test_recover_restores_a_folder_killed_between_renames_and_drops_strays(tmp_path):
    with atomic_directory(tmp_path / "last", "test") as tmp:
        (tmp / "a").write_text("1")
    (tmp_path / "last").rename(tmp_path / ".last.old")  # killed after the old folder moved aside
    (tmp_path / ".best.x1.tmp").mkdir()  # killed mid-write
    (tmp_path / ".metrics.y.tmp.jsonl").write_text("")
    removed = recover(tmp_path)
    assert (tmp_path / "last" / "a").read_text() == "1"
    assert {p.name for p in removed} == {".best.x1.tmp", ".metrics.y.tmp.jsonl"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    (tmp_path / ".last.old").mkdir()  # a stale old copy beside a whole folder is dropped
    recover(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]


def test_resolve_checkpoint(tmp_path):
    model = EncoderDecoder(tiny())
    model.save(tmp_path / "run" / "last")
    assert resolve_checkpoint(tmp_path / "run") == tmp_path / "run" / "last"
    model.save(tmp_path / "run" / "best")
    assert resolve_checkpoint(tmp_path / "run") == tmp_path / "run" / "best"
    assert resolve_checkpoint(tmp_path / "run" / "last") == tmp_path / "run" / "last"
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder"):
        resolve_checkpoint(tmp_path)


def test_damaged_files_are_errors_naming_them(tmp_path):
    (tmp_path / "t.json").write_text('{"step": 3')
    with pytest.raises(ValueError, match=r"t\.json: damaged"):
        read_json(tmp_path / "t.json")
    (tmp_path / "t.json").write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        read_json(tmp_path / "t.json")
    model = EncoderDecoder(tiny())
    model.save(tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:500])
    with pytest.raises(ValueError, match=r"model\.safetensors: checksum mismatch"):
        load_model(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "checksums.json").unlink()  # a folder from before checksums: safetensors finds it
    with pytest.raises(ValueError, match=r"model\.safetensors: damaged or truncated"):
        load_model(tmp_path / "ckpt")


@pytest.mark.parametrize("damage", ["truncate weights", "edit config", "delete weights"])
def test_checksums_find_a_damaged_or_edited_checkpoint(tmp_path, damage):
    EncoderDecoder(tiny()).save(tmp_path / "ckpt")
    folder = tmp_path / "ckpt"
    listed = json.loads((folder / "checksums.json").read_text())
    assert sorted(listed) == ["config.json", "model.safetensors"] and all(len(v) == 64 for v in listed.values())
    load_model(folder)  # intact: loads
    if damage == "truncate weights":
        (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-8])
    elif damage == "edit config":  # still valid JSON and a valid config: only the checksum can tell
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "dropout": 0.2}))
    else:
        (folder / "model.safetensors").unlink()
    name = "config" if damage == "edit config" else "model"
    with pytest.raises(ValueError, match=rf"ckpt/{name}\.\w+: (checksum mismatch|missing)"):
        load_model(folder)


def test_saved_folder_holds_json_config_safetensors_and_checksums_only(tmp_path):
    model = EncoderDecoder(tiny())
    model.save(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checksums.json", "config.json",
                                                                      "model.safetensors"]
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["d_model"] == 64
    loaded = load_model(tmp_path / "ckpt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values(),
                                                  strict=True))


def test_a_large_tensor_is_read_a_slice_of_rows_at_a_time_and_equals_the_stored_one(tmp_path, monkeypatch):
    """``load_weights``: a stored tensor over ``SLICE_BYTES`` is copied in slices of rows, the file mapped anew for
    each (its pages let go slice by slice); the model read equals the one saved, a quantized copy made as it is
    read too (inside ``memory_returned_at_once``)."""
    from aiayn.inference.precision import converter
    from aiayn.io import checkpoint

    model = EncoderDecoder(tiny())
    model.save(tmp_path / "ckpt")
    x = torch.randint(1, 30, (2, 7))
    whole = load_model(tmp_path / "ckpt", convert=converter(int4=True))(x, x)  # every tensor read at once
    slices = []
    read_slices = checkpoint._read_slices
    monkeypatch.setattr(checkpoint, "SLICE_BYTES", 1000)  # rows of 64 float32: 3 rows a slice
    monkeypatch.setattr(checkpoint, "_read_slices", lambda t, name, file: slices.append(name)
                        or read_slices(t, name, file))
    loaded = load_model(tmp_path / "ckpt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values(),
                                                  strict=True))
    sizes = {name: t.numel() * t.element_size() for name, t in model.state_dict().items()}
    assert "encoder.layers.0.self_attn.q_proj.weight" in slices and all(sizes[name] > 1000 for name in slices)
    assert any(size <= 1000 for size in sizes.values())  # those read whole
    assert torch.equal(load_model(tmp_path / "ckpt", convert=converter(int4=True))(x, x), whole)


def test_a_folder_checked_once_is_not_read_again_until_a_file_changes(tmp_path, monkeypatch):
    """verify_checkpoint remembers a folder it passed (each file's size and time), so that loading it again (a server
    reloading an unloaded model) skips the hashing; a file changed since is read again, and a folder whose files
    were written within 2 s of the check is never remembered (a change then could keep the same time)."""
    import os

    from aiayn.io import checkpoint
    from aiayn.io.checkpoint import verify_checkpoint

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        EncoderDecoder(tiny()).save(folder)
    for f in old.iterdir():
        os.utime(f, (1_600_000_000, 1_600_000_000))
    reads = []
    real = checkpoint.sha256_file
    monkeypatch.setattr(checkpoint, "sha256_file", lambda f: reads.append(f) or real(f))
    verify_checkpoint(old)
    first = len(reads)
    verify_checkpoint(old)
    assert first > 0 and len(reads) == first  # remembered
    for folder in (old, new):
        verify_checkpoint(folder)
        weights = folder / "model.safetensors"
        stamp = weights.stat()
        data = bytearray(weights.read_bytes())
        data[-1] ^= 1
        weights.write_bytes(bytes(data))  # the same size
        if folder == new:
            os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and the same time
        with pytest.raises(ValueError, match="checksum mismatch"):
            verify_checkpoint(folder)
