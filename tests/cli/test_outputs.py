"""Nothing a user owns is ever lost: every command that writes a path refuses one it did not write (a one-line
error naming it and --overwrite, exit 2, every byte left as it was), refuses a file in the way of a folder, may
replace its own earlier output, and writes files and folders that follow the umask."""

import os
import stat

import pytest

from aiayn import EncoderDecoder
from aiayn.cli import main
from aiayn.io.files import MARKER, atomic_directory, claim_output
from aiayn.tokenizers import SentencePiecePair, SentencePieceTokenizer

from conftest import tiny


def _theirs(folder):
    """A folder of someone else's files (one nested), and a snapshot of every byte."""
    (folder / "notes").mkdir(parents=True)
    (folder / "thesis.txt").write_text("four years of work\n")
    (folder / "notes" / "ideas.md").write_bytes(b"\x00\x01 binary too")
    return _snapshot(folder)


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(argv, path, capsys, before):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "--overwrite" in err, err
    assert _snapshot(path) == before


def _folder_commands(tmp_path, out):
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"recipe: {tmp_path / 'r.yaml'}\noutput: {out}\nvariants: {{base: {{}}}}\n")
    (tmp_path / "r.yaml").write_text("data: reverse\npreset: tiny\n")
    return {
        "train": ["train", "--data", "reverse", "--preset", "tiny", "--output", str(out)],
        "import": ["import", str(tmp_path / "hf-folder"), "--output", str(out)],
        "export-hf": ["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--output", str(out)],
        "export-ct2": ["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "ctranslate2", "--output",
                       str(out)],
        "average": ["average", "--run", str(tmp_path / "run"), "--output", str(out)],
        "distill": ["distill", "--teacher", str(tmp_path / "ckpt"), "--data", "reverse", "--output", str(out)],
        "preprocess": ["preprocess", "--data", "reverse", "--tokenizer", str(tmp_path / "tok"), "--output", str(out)],
        "tokenizer": ["tokenizer", "train", "--data", "reverse", "--output", str(out)],
        "experiment": ["experiment", str(spec)],
        "data": ["data", "wmt14-en-de", "--output", str(out), "--base-url", "http://127.0.0.1:9/none"],
        "demo": ["demo", "--output", str(out), "--steps", "1"],
    }


FOLDER_COMMANDS = ["train", "import", "export-hf", "export-ct2", "average", "distill", "preprocess", "tokenizer",
                   "experiment", "data", "demo"]


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_folder_the_user_owns_is_refused_and_left_whole(command, tmp_path, capsys):
    out = tmp_path / "mine"
    before = _theirs(out)
    _refused(_folder_commands(tmp_path, out)[command], out, capsys, before)


@pytest.mark.parametrize("command", ["import", "export-hf", "export-ct2", "average", "tokenizer", "distill",
                                     "preprocess", "data", "train"])
def test_a_file_in_the_way_of_a_folder_is_a_one_line_error(command, tmp_path, capsys):
    out = tmp_path / "a-file"
    out.write_text("mine\n")
    argv = _folder_commands(tmp_path, out)[command]
    for extra in ([], ["--overwrite"]):
        assert main(argv + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "in the way" in err and str(out) in err, err
        assert out.read_text() == "mine\n" and not (tmp_path / ".a-file.old").exists()


def _file_commands(tmp_path, out, trained_run):
    return {
        "translate": ["translate", "--checkpoint", str(trained_run), "--input", str(tmp_path / "in.txt"),
                      "--output", str(out)],
        "evaluate": ["evaluate", "--checkpoint", str(trained_run), "--src", str(tmp_path / "in.txt"), "--ref",
                     str(tmp_path / "in.txt"), "--hyp-output", str(out)],
        "shortlist": ["shortlist", "--checkpoint", str(trained_run), "--data", "reverse", "--output", str(out)],
        "plot": ["plot", str(trained_run), "--output", str(out)],
        "show-positions": ["show", "positions", "--output", str(out)],
        "show-mask": ["show", "mask", "--output", str(out)],
        "show-shapes": ["show", "shapes", "--output", str(out)],
        "show-attention": ["show", "attention", "--checkpoint", str(trained_run), "a b c", "--output", str(out)],
    }


@pytest.mark.parametrize("command", ["translate", "evaluate", "shortlist", "plot", "show-positions", "show-mask",
                                     "show-shapes", "show-attention"])
def test_a_file_the_user_owns_is_refused_then_replaced_with_overwrite(command, tmp_path, capsys, trained_run):
    out = tmp_path / ("mine.txt" if command in ("translate", "evaluate", "show-shapes") else
                      "mine.safetensors" if command == "shortlist" else "mine.png")
    out.write_bytes(b"my own file")
    (tmp_path / "in.txt").write_text("a b c\n")
    argv = _file_commands(tmp_path, out, trained_run)[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "--overwrite" in err, err
    assert out.read_bytes() == b"my own file"
    assert main([*argv, "--overwrite"]) == 0
    assert out.read_bytes() != b"my own file"


def _checkpoint(folder):
    model = EncoderDecoder(tiny())
    model.save(folder)
    SentencePiecePair(SentencePieceTokenizer.train(["a b c d"] * 20, vocab_size=270)).save(folder)


def test_an_output_the_command_wrote_is_replaced_and_follows_the_umask(tmp_path, capsys):
    run = tmp_path / "run" / "checkpoints"
    for step in (1, 2):
        _checkpoint(run / f"step_{step:08d}")
    out = tmp_path / "avg"
    old = os.umask(0o022)
    try:
        for _ in range(2):  # the second run replaces the first's output: its own
            assert main(["average", "--run", str(tmp_path / "run"), "--output", str(out)]) == 0
        assert main(["average", "--run", str(tmp_path / "run"), "--output", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()} == {0o644}
    assert (out / "checksums.json").is_file() and not (out / MARKER).exists()  # a checkpoint: its checksums tell
    assert main(["tokenizer", "train", "--data", "reverse", "--vocab-size", "300", "--output", str(out)]) == 2
    assert "not written by aiayn tokenizer" in capsys.readouterr().err  # another command's output is not its own


def test_claim_output_rules(tmp_path):
    assert claim_output(tmp_path / "new", "x") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert claim_output(tmp_path / "empty", "x") == tmp_path / "empty"
    with atomic_directory(tmp_path / "ours", "x") as tmp:
        (tmp / "a.txt").write_text("1")
    assert claim_output(tmp_path / "ours", "x") == tmp_path / "ours"
    with pytest.raises(ValueError, match="not written by aiayn y"):
        claim_output(tmp_path / "ours", "y")
    assert claim_output(tmp_path / "ours", "y", overwrite=True) == tmp_path / "ours"
    (tmp_path / "f").write_text("1")
    with pytest.raises(ValueError, match="a file is in the way of the folder"):
        claim_output(tmp_path / "f", "x", overwrite=True)
    with pytest.raises(ValueError, match="a folder is in the way of the file"):
        claim_output(tmp_path / "ours", "x", folder=False, overwrite=True)
    with pytest.raises(ValueError, match="--overwrite"):
        claim_output(tmp_path / "f", "x", folder=False)
    assert claim_output(tmp_path / "f", "x", folder=False, overwrite=True) == tmp_path / "f"
