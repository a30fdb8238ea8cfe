"""Sequence-level distillation: the teacher's translations become a corpus, chunks resume after an
interruption, and a student trains on the folder with the real references for validation."""

import json

import pytest

from aiayn.cli import main
from aiayn.data.datasets import load_splits, synthetic_pairs
from aiayn.inference.translator import Translator
from aiayn.training.distill import distill


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A reverse-task TSV (train) and a validation TSV."""
    folder = tmp_path_factory.mktemp("distill-data")
    for name, count, seed in (("train.tsv", 45, 0), ("valid.tsv", 7, 1)):
        pairs = synthetic_pairs("reverse", count, seed)
        (folder / name).write_text("".join(f"{s}\t{t}\n" for s, t in zip(pairs.sources, pairs.targets, strict=True)))
    return folder


class Counting:
    """A translator that counts the sentences it is asked for (and answers as the teacher)."""

    def __init__(self, inner):
        self.inner, self.asked, self.decoding = inner, 0, inner.decoding

    def translate(self, texts, **options):
        self.asked += len(texts)
        self.batch_sizes = {*getattr(self, "batch_sizes", ()), options.get("batch_size")}
        return self.inner.translate(texts, **options)


def test_distilled_corpus_holds_the_teachers_translations_and_resumes(trained_run, corpus, tmp_path):
    splits = load_splits(str(corpus / "train.tsv"), valid=str(corpus / "valid.tsv"))
    teacher = Counting(Translator.from_checkpoint(trained_run))
    out = tmp_path / "distilled"
    record = distill(teacher, splits, out, beam_size=2, chunk=10, progress=False, batch_size=3)
    assert record["chunks"] == 5 and record["chunks_computed"] == 5 and teacher.asked == 45
    assert teacher.batch_sizes == {3}  # translated 3 sentences at a time
    lines = (out / "train.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == splits.train.sources
    expected = Translator.from_checkpoint(trained_run).translate(splits.train.sources[:10], beam_size=2)
    assert [line.split("\t")[1] for line in lines[:10]] == expected
    assert (out / "valid.tsv").read_text().splitlines()[0] == f"{splits.valid.sources[0]}\t{splits.valid.targets[0]}"
    (out / "parts" / "000003.tsv").unlink()  # as if killed while translating chunk 3
    (out / "train.tsv").unlink()
    again = Counting(teacher.inner)
    record = distill(again, splits, out, beam_size=2, chunk=10, progress=False)
    assert again.asked == 10 and record["chunks_resumed"] == 4  # only the missing chunk is translated
    assert (out / "train.tsv").read_text().splitlines() == lines


def test_distill_command_then_train_on_the_folder(trained_run, corpus, tmp_path, capsys):
    out = tmp_path / "distilled"
    assert main(["distill", "--teacher", str(trained_run), "--data", str(corpus / "train.tsv"), "--output", str(out),
                 "--beam-size", "1", "--chunk", "20", "--batch-size", "7"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["sentences"] > 0
    splits = load_splits(str(out))
    assert len(splits.train) == len((out / "train.tsv").read_text().splitlines()) - splits.train.dropped["empty"]
    run = tmp_path / "student"
    assert main(["train", "--data", str(out), "--preset", "tiny", "--max-steps", "5", "--eval-every", "5",
                 "--output", str(run), "--vocab-size", "300", "--max-tokens", "256"]) == 0
    assert (run / "best" / "model.safetensors").is_file()


def test_a_folder_without_train_tsv_is_a_clear_error(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path), "--output", str(tmp_path / "run"), "--max-steps", "1"]) == 2
    assert "needs train.tsv" in capsys.readouterr().err
