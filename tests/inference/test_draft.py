"""``--draft`` (inference/draft.py): every way to draft gives the text greedy decoding gives, through ``aiayn
generate`` and ``aiayn translate``; a draft that cannot serve is one line."""

import contextlib
import os
import re
import time

import pytest

from conftest import SMOLLM2, run_main

PROMPT = "the cat sat on the mat . a dog ran in the park 1 .\nthe cat sat"


def test_generate_drafts_by_prompt_lookup_its_own_int8_copy_or_a_checkpoint_and_says_the_same(lm_run):
    common = ["generate", "--checkpoint", str(lm_run), "--prompt", PROMPT, "--max-new-tokens", "60"]
    plain = run_main(*common, "--temperature", "0")
    assert plain.returncode == 0, plain.stderr
    for draft in ("ngram", "int8", str(lm_run)):
        got = run_main(*common, "--draft", draft)  # greedy implied
        assert got.returncode == 0, got.stderr
        assert got.stdout == plain.stdout, draft
        assert "speculative decoding:" in got.stderr and "drafted tokens accepted" in got.stderr
    fixed = run_main(*common, "--draft", "ngram", "--draft-tokens", "2")
    assert fixed.stdout == plain.stdout
    sampled = run_main(*common, "--draft", "int8", "--temperature", "0.8", "--seed", "1")  # speculative sampling
    assert sampled.returncode == 0 and sampled.stdout.strip() and "drafted tokens accepted" in sampled.stderr


def test_a_draft_that_cannot_serve_is_one_line(lm_run, trained_run):
    common = ["generate", "--checkpoint", str(lm_run), "--prompt", "the", "--max-new-tokens", "5"]
    for flags, words in ((["--draft", "ngram", "--strategy", "beam"], "greedy or sampled"),
                         (["--draft", str(trained_run)], "other tokenizers"),
                         (["--draft", "ngram", "--draft-tokens", "0"], "draft_tokens")):
        done = run_main(*common, *flags)
        assert done.returncode == 2 and words in done.stderr, (flags, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_translate_drafts_by_prompt_lookup_or_its_own_int8_copy_with_the_same_output(trained_run):
    text = "a b c d e f\ng h a b\nc c d\n"
    common = ["translate", "--checkpoint", str(trained_run), "--beam-size", "1"]
    plain = run_main(*common, stdin=text)
    assert plain.returncode == 0, plain.stderr
    for draft in ("ngram", "int8"):
        got = run_main(*common, "--draft", draft, stdin=text)
        assert got.returncode == 0 and got.stdout == plain.stdout, (draft, got.stderr)


def _wait_for_children(said: str, limit_s: float = 900.0) -> bool:
    """Wait for the compiles a run left going behind it (``goes on (process N)``); whether there were any."""
    pids = [int(pid) for pid in re.findall(r"goes on \(process (\d+)\)", said)]
    end = time.monotonic() + limit_s
    for pid in pids:
        while time.monotonic() < end:
            with contextlib.suppress(ChildProcessError):  # already reaped
                os.waitpid(pid, os.WNOHANG)  # run_main runs in this process: the compiles are its children
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(1.0)
    return bool(pids)


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2)
def test_the_real_smollm2_says_the_same_drafted_by_prompt_lookup_or_its_own_int4_copy():
    """SmolLM2-135M-Instruct asked to repeat a list: greedy, then drafted by prompt lookup and by its own int4
    copy (float32 verifying, the copy's one-token steps compiled), the same text; prompt lookup drafts the repeated
    list several tokens a pass. A chat
    turn drafted by prompt lookup is the greedy one too."""
    items = ", ".join(f"item {i}: {w}" for i, w in enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime"]))
    common = ["generate", "--checkpoint", str(SMOLLM2), "--prompt", f"List: {items}.\nThe same list again: item 0:",
              "--max-new-tokens", "48"]
    plain = run_main(*common, "--temperature", "0", "--compile", "off")
    assert plain.returncode == 0, plain.stderr
    for draft, compiled in (("ngram", "off"), ("int4", "on"), ("int4", "on")):  # the int4 draft's steps compiled
        got = run_main(*common, "--draft", draft, "--compile", compiled)
        assert got.returncode == 0 and got.stdout == plain.stdout, (draft, got.stdout, plain.stdout)
        if compiled == "on" and not _wait_for_children(got.stderr):  # the second run finds what the first kept:
            assert "compiling the decoding step" not in got.stderr, got.stderr  # loaded, nothing compiled again
        if draft == "ngram":
            passes = got.stderr.split("drafted tokens accepted")[1]
            assert float(passes.split("tokens per main-model pass")[0].split(",")[-1]) > 1.5, got.stderr
    question = "What is the capital of France?\n"
    chat = ["chat", "--checkpoint", str(SMOLLM2), "--max-new-tokens", "24", "--compile", "off"]
    plain = run_main(*chat, "--temperature", "0", stdin=question)
    drafted = run_main(*chat, "--draft", "ngram", stdin=question)
    assert plain.returncode == drafted.returncode == 0 and drafted.stdout == plain.stdout, drafted.stderr
    assert "Paris" in plain.stdout


def test_a_non_autoregressive_prophet_drafts_a_whole_translation_and_the_output_is_greedys(trained_run, ctc_run,
                                                                                          cmlm_run):
    """The CTC and the CMLM models, trained on the same task with the same tokenizer, draft each sentence's whole
    translation in one pass; the autoregressive translator keeps what it agrees with: greedy's output, fewer
    passes."""
    from aiayn.decoding.drafts import ProphetDraft
    from aiayn.inference.translator import Translator

    texts = ["a b c d e f", "g h a b", "c c d", "e f g h a b c d"]
    plain = Translator.from_checkpoint(trained_run, beam_size=1).translate(texts)
    for prophet in (ctc_run, cmlm_run):
        drafted = Translator.from_checkpoint(trained_run, beam_size=1, draft=prophet)
        assert isinstance(drafted.draft, ProphetDraft)
        assert drafted.translate(texts) == plain
        stats = drafted.speculative
        assert stats.accepted > 0 and stats.main_passes < stats.generated, stats.summary()


def test_a_checkpoint_can_prefer_a_draft_in_its_generation_json(lm_run, tmp_path):
    """``"draft"`` in generation.json: the draft used when ``--draft`` is not given; ``--draft none`` turns it off;
    a draft that is not a name or a path is one line naming the file."""
    import json
    import shutil

    from aiayn.io.run import resolve_checkpoint

    folder = shutil.copytree(resolve_checkpoint(lm_run), tmp_path / "ckpt")
    options = json.loads((folder / "generation.json").read_text()) if (folder / "generation.json").exists() else {}
    (folder / "generation.json").write_text(json.dumps({**options, "temperature": 0, "draft": "ngram"}))
    common = ["generate", "--checkpoint", str(folder), "--prompt", PROMPT, "--max-new-tokens", "40"]
    drafted, plain = run_main(*common), run_main(*common, "--draft", "none")
    assert drafted.returncode == plain.returncode == 0, drafted.stderr + plain.stderr
    assert drafted.stdout == plain.stdout
    assert "drafted tokens accepted" in drafted.stderr and "drafted tokens accepted" not in plain.stderr
    (folder / "generation.json").write_text(json.dumps({"draft": 4}))
    bad = run_main(*common)
    assert bad.returncode == 2 and "generation.json: draft:" in bad.stderr and "Traceback" not in bad.stderr
