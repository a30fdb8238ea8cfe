"""``aiayn show drafts``: speculative decoding pass by pass. Each pass of the main model is noted (its guesses and
what it kept); the kept tokens, pass after pass, are the output, which is plain greedy's; each pass reads as the
guesses agreed to, the one refused, the ones never judged and the model's own token; the command prints and draws
it for a language model and a translator, and refuses an encoder-only model in one line."""

import torch

from aiayn import generate
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.inference.load import load_checkpoint
from aiayn.visual.drafts import DraftedPass, drafted_passes, format_drafts

from conftest import run_main


def test_the_noted_passes_make_the_output_plain_greedy_gives(lm_run):
    model, tokenizers = load_checkpoint(lm_run)
    ids = torch.tensor([tokenizers.src.encode("the cat sat on the mat . a dog ")])
    stats = SpeculativeStats(passes=[])
    drafted = generate(model, ids, "greedy", max_new_tokens=40, draft="ngram", speculative_stats=stats)[0]
    assert drafted == generate(model, ids, "greedy", max_new_tokens=40)[0]
    kept = [token for _, made in stats.passes for token in made]
    assert kept[: len(drafted)] == drafted and len(stats.passes) == stats.main_passes < len(drafted)
    assert sum(len(made) - 1 for guess, made in stats.passes if guess) == stats.accepted > 0
    assert sum(len(guess) for guess, _ in stats.passes) == stats.proposed


def test_a_pass_reads_as_agreed_refused_unjudged_and_the_models_own():
    passes = [([5, 6, 7, 8], [5, 6, 9]), ([], [3]), ([4], [4, 8]), ([1, 2], [7])]
    found = drafted_passes(passes, lambda t: "abc"[t % 3] * (t // 3 + 1))
    assert found == [DraftedPass(["cc", "aaa"], "bbb", ["ccc"], "aaaa"), DraftedPass([], None, [], "aa"),
                     DraftedPass(["bb"], None, [], "ccc"), DraftedPass([], "b", ["c"], "bbb")]
    lines = format_drafts(found).splitlines()
    assert lines[0] == "pass   1: ✓cc ✓aaa ✗bbb (1 more) → aaaa" and lines[1] == "pass   2: → aa"
    assert lines[3] == "pass   4: ✗b (1 more) → bbb"
    ended = drafted_passes([([5, 6, 7], [5, 6, 7, 8]), ([5, 6], [5, 9])], lambda t: str(t), end_ids=(6,))
    assert ended == [DraftedPass(["5", "6"], None, [], None), DraftedPass(["5"], "6", [], "9")]
    assert format_drafts(ended).splitlines()[0] == "pass   1: ✓5 ✓6"


def test_show_drafts_prints_and_draws_each_pass(lm_run, trained_run, tmp_path):
    out = tmp_path / "drafts.png"
    done = run_main("show", "drafts", "--checkpoint", str(lm_run), "the cat sat on the mat . a dog ", "--output",
                    str(out), "--max-new-tokens", "30")
    assert done.returncode == 0, done.stderr
    assert "pass   1:" in done.stdout and "✓" in done.stdout and "drafted tokens accepted" in done.stdout
    assert out.stat().st_size > 10_000
    translated = run_main("show", "drafts", "--checkpoint", str(trained_run), "a b c d", "--draft", "ngram")
    assert translated.returncode == 0 and "output: " in translated.stdout, translated.stderr


def test_show_drafts_refuses_an_encoder_only_model_in_one_line(mlm_run):
    done = run_main("show", "drafts", "--checkpoint", str(mlm_run), "the cat")
    assert done.returncode != 0 and "encoder-only" in done.stderr and len(done.stderr.strip().splitlines()) == 1
