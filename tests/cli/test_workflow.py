"""End to end through the command line on tiny data: train, translate, evaluate, average, plot, errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_main

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def aiayn(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command in this process (``run_main``); with ``env``, in a process of its own with that environment."""
    if env is None:
        return run_main(*args, stdin=stdin or "")
    return subprocess.run([sys.executable, "-m", "aiayn", *args], input=stdin, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.fixture(scope="module")
def run(trained_run) -> Path:
    return trained_run


def test_run_folder_layout(run):
    assert {p.name for p in run.iterdir()} >= {"best", "last", "metrics.jsonl", "checkpoints"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "valid_bleu" in r]
    assert [r["step"] for r in evals] == [100, 200, 300]
    assert evals[-1]["valid_bleu"] > 50, evals  # 66.9-72.7 over 8 runs of the recipe (bench_learning_spread.py)


def test_translate_stdin_and_files(run, tmp_path):
    result = aiayn("translate", "--checkpoint", str(run), stdin="a b c d e\nj i h g f\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "e d c b a" and lines[1] == "f g h i j"
    (tmp_path / "in.txt").write_text("a b c d e\nj i h g f\n")  # a file in, a file out: the same lines
    result = aiayn("translate", "--checkpoint", str(run / "last"), "--input", str(tmp_path / "in.txt"),
                   "--output", str(tmp_path / "out.txt"))
    assert result.returncode == 0 and result.stdout == ""
    assert (tmp_path / "out.txt").read_text() == "e d c b a\nf g h i j\n"


def test_evaluate_prints_sacrebleu_with_signature(run, tmp_path):
    """The model's own translations as the references score 100; a changed reference scores less. (The tiny
    model's outputs differ across CPUs and thread counts, so the references are read from it.)"""
    (tmp_path / "src.txt").write_text("a b c d e f\nc c d d e\n")
    own = aiayn("translate", "--checkpoint", str(run), "--input", str(tmp_path / "src.txt"))
    assert own.returncode == 0, own.stderr
    (tmp_path / "ref.txt").write_text(own.stdout)
    result = aiayn("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "src.txt"),
                   "--ref", str(tmp_path / "ref.txt"), "--json")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert scores["bleu"] == 100.0 and "tok:13a" in scores["bleu_signature"]
    text = aiayn("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "src.txt"),
                 "--ref", str(tmp_path / "ref.txt"))
    assert text.stdout.startswith("BLEU = 100.00") and "chrF = " in text.stdout
    (tmp_path / "ref.txt").write_text("x y z\n" + own.stdout.splitlines()[1] + "\n")
    worse = aiayn("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "src.txt"),
                  "--ref", str(tmp_path / "ref.txt"), "--json")
    assert json.loads(worse.stdout)["bleu"] < 100.0


def test_average_and_plot(run, tmp_path):
    result = aiayn("average", "--run", str(run), "--last", "2", "--output", str(tmp_path / "avg"))
    assert result.returncode == 0, result.stderr
    translated = aiayn("translate", "--checkpoint", str(tmp_path / "avg"), stdin="a b c d e\n")
    assert translated.stdout.strip() == "e d c b a"
    plotted = aiayn("plot", str(run), "--output", str(tmp_path / "curves.png"))
    assert plotted.returncode == 0, plotted.stderr
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_tokenizer_train_command(tmp_path):
    result = aiayn("tokenizer", "train", "--data", "multi30k", "--data-dir", str(SHARED / "multi30k"),
                   "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "1000", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tokenizer.model").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["train", "--data", "nowhere.tsv", "--src-lang", "de", "--tgt-lang", "en"], "nowhere.tsv"),
    (["train", "--data", "numbers", "--max-steps", "0"], "max_steps"),
    (["translate", "--checkpoint", "no-such-run"], "no-such-run"),
    (["evaluate", "--checkpoint", "x", "--src", "missing.de", "--ref", "missing.en"], "missing.de"),
])
def test_user_mistakes_give_one_line_and_exit_2(args, message, tmp_path):
    result = aiayn(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_mismatched_files_and_bad_utf8_through_train(tmp_path):
    (tmp_path / "c.de").write_text("a\nb\nc\n")
    (tmp_path / "c.en").write_text("a\nb\n")
    result = aiayn("train", "--data", str(tmp_path / "c"), "--src-lang", "de", "--tgt-lang", "en",
                   "--output", str(tmp_path / "r"))
    assert result.returncode == 2 and "has 3 lines but" in result.stderr and "has 2" in result.stderr
    (tmp_path / "bad.tsv").write_bytes(b"a\tb\n\xff\tc\n")
    result = aiayn("train", "--data", str(tmp_path / "bad.tsv"), "--output", str(tmp_path / "r2"))
    assert result.returncode == 2 and "bad.tsv:2: invalid UTF-8" in result.stderr


def test_offline_multi30k_message(tmp_path):
    env = {**__import__("os").environ, "AIAYN_CACHE": str(tmp_path), "AIAYN_MULTI30K_URL": "http://127.0.0.1:9"}
    result = aiayn("train", "--data", "multi30k", "--output", str(tmp_path / "r"), env=env)
    assert result.returncode == 2 and "--data-dir" in result.stderr and len(result.stderr.splitlines()) == 1


def test_existing_run_is_not_overwritten(run):
    result = aiayn("train", "--data", "reverse", "--output", str(run))
    assert result.returncode == 2 and "--resume" in result.stderr


def test_speculative_translation_with_a_draft_checkpoint(run, tmp_path):
    texts = "a b c d e\nj i h g f\nc c a b\nd e f g h i\n"
    plain = aiayn("translate", "--checkpoint", str(run), "--beam-size", "1", stdin=texts)
    draft = sorted((run / "checkpoints").glob("step_*"))[0]  # an earlier, weaker model with the same tokenizer
    result = aiayn("translate", "--checkpoint", str(run), "--draft", str(draft), stdin=texts)
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain.stdout
    assert "drafted tokens accepted" in result.stderr and "tokens per main-model pass" in result.stderr
    (tmp_path / "s.txt").write_text(texts)
    result = aiayn("evaluate", "--checkpoint", str(run), "--draft", str(run), "--src", str(tmp_path / "s.txt"),
                   "--ref", str(tmp_path / "s.txt"), "--json", "--tokenized-bleu", "en", "--lowercase")
    scores = json.loads(result.stdout)
    assert scores["acceptance_rate"] == 1.0 and scores["tokens_per_main_pass"] > 1  # its own draft: all accepted
    assert "tokenized_bleu" in scores and "truncated_lines" in scores and "case:lc" in scores["bleu_signature"]


def test_draft_with_other_tokenizers_or_beams_is_a_one_line_error(run, tmp_path):
    import shutil

    from aiayn.tokenizers import SentencePieceTokenizer

    other = tmp_path / "other"
    shutil.copytree(run / "best", other)
    texts = ["x y z w"] * 50 + ["q r s t u v"] * 50
    SentencePieceTokenizer.train(texts, vocab_size=280).save(other / "tokenizer.model")
    for args, message in [(["--draft", str(other)], "other tokenizers"),
                          (["--draft", str(run), "--beam-size", "4"], "pass --beam-size 1")]:
        result = aiayn("translate", "--checkpoint", str(run), *args, stdin="a b c\n")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


def _one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr


def test_resume_refuses_contradicting_settings_and_reports_harmless_changes(run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    refused = aiayn("train", "--output", str(copy), "--resume", "--preset", "base", "--vocab-size", "500",
                    "--task", "lm")
    _one_line_error(refused, "--preset (field preset): run has 'tiny', asked 'base'",
                    "--vocab-size (field vocab_size): run has 300", "--task")
    resumed = aiayn("train", "--output", str(copy), "--resume", "--max-steps", "302", "--eval-every", "2",
                    "--bleu-sentences", "20")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resume: max_steps: 300 -> 302" in resumed.stderr
    assert json.loads((copy / "last" / "trainer.json").read_text())["step"] == 302
    (copy / "last" / "trainer.json").write_text('{"step": 3')
    _one_line_error(aiayn("train", "--output", str(copy), "--resume"), str(copy / "last" / "trainer.json"))


def test_recipe_mistakes_under_model_are_found_before_any_work(tmp_path):
    for body, word in [("model:\n  dropuot: 0.1\n", "dropuot"), ("model:\n  dropout: high\n", "dropout")]:
        recipe = tmp_path / "r.yaml"
        recipe.write_text("data: reverse\n" + body)
        result = aiayn("train", "--config", str(recipe), "--output", str(tmp_path / "out"))
        _one_line_error(result, str(recipe), word)
        assert not (tmp_path / "out" / "tokenizer").exists()


def test_output_that_is_a_file_or_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("x")
    _one_line_error(aiayn("train", "--data", "reverse", "--output", str(tmp_path / "file")), "file", "in the way")
    _one_line_error(aiayn("train", "--data", "reverse", "--output", str(tmp_path / "file" / "run")), "--output",
                    "cannot write")


def test_truncated_weights_are_a_one_line_error(run, tmp_path):
    import shutil

    broken = tmp_path / "ckpt"
    shutil.copytree(run / "best", broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    _one_line_error(aiayn("translate", "--checkpoint", str(broken), stdin="a b\n"), str(weights))


def test_translate_input_edge_cases(run, tmp_path):
    bad = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(run)],
                         input=b"a b c\n\xff\xfe d\n", capture_output=True, timeout=300)
    assert bad.returncode == 2 and b"<stdin>:2: invalid UTF-8" in bad.stderr and b"Traceback" not in bad.stderr
    long = " ".join("abcdefghij" * 20)  # 200 one-letter words: more tokens than the model's max_len
    result = aiayn("translate", "--checkpoint", str(run), stdin=f"a b c d e\n\n   \n{long}\nj i h g f\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")
    assert out[1] == "" and out[2] == "" and out[0] == "e d c b a" and out[4] == "f g h i j"
    assert "1 line(s) longer than the model's" in result.stderr and "(lines 4)" in result.stderr
    (tmp_path / "s.txt").write_text(f"a b c\n{long}\n")
    scores = aiayn("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "s.txt"),
                   "--ref", str(tmp_path / "s.txt"), "--json")
    assert json.loads(scores.stdout)["truncated_lines"] == 1
    (tmp_path / "empty.txt").write_text("")
    _one_line_error(aiayn("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "empty.txt"),
                          "--ref", str(tmp_path / "empty.txt")), "no lines")
