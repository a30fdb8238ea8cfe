"""Text generation with a decoder-only checkpoint: the CLI streams, greedy equals aiayn.generate, seeds repeat."""


import pytest
import torch

from aiayn import generate
from aiayn.inference.generator import TextGenerator, TextStream
from aiayn.tokenizers import SentencePieceTokenizer

from conftest import run_main

aiayn = run_main  # the command, run in this process


def test_text_stream_holds_back_a_character_split_into_bytes():
    tok = SentencePieceTokenizer.train(["abc abc"] * 20, vocab_size=270)
    ids = tok.encode("a é")  # é is not in the vocabulary: two byte pieces
    stream = TextStream(tok)
    pieces = [stream.add(i) for i in ids]
    assert "".join(pieces) == tok.decode(ids) and pieces[-2] == "" and pieces[-1].endswith("é")


def test_greedy_cli_equals_the_library_and_streams(lm_run):
    gen = TextGenerator.from_checkpoint(lm_run)
    ids = torch.tensor([gen.prompt_ids("the cat ")])
    expected = gen.tokenizer.decode(generate(gen.model, ids, "greedy", max_new_tokens=30)[0])
    chunks = []
    assert gen.generate("the cat ", 30, temperature=0, on_text=lambda i, t: chunks.append(t)) == [expected]
    assert "".join(chunks) == expected and len(chunks) > 10  # text arrives piece by piece
    assert expected.startswith("sat on the mat")  # the planted text was learned
    result = aiayn("generate", "--checkpoint", str(lm_run), "--prompt", "the cat ", "--max-new-tokens", "30",
                   "--temperature", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"


def test_seeded_sampling_repeats_and_stdin_prompts(lm_run):
    args = ("generate", "--checkpoint", str(lm_run), "--max-new-tokens", "40", "--temperature", "1.5")
    a = aiayn(*args, "--seed", "3", stdin="a dog")
    b = aiayn(*args, "--seed", "3", stdin="a dog")
    c = aiayn(*args, "--seed", "4", stdin="a dog")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout != c.stdout
    many = aiayn(*args, "--seed", "3", "--num-samples", "3", stdin="a dog")
    assert many.returncode == 0 and many.stdout.count("\n---\n") == 3


@pytest.mark.parametrize("args, words", [
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--temperature", "0", "--num-samples", "2"], "--num-return-sequences (field num_return_sequences)"),
    (["--top-k", "-2"], "--top-k (field top_k): must be"),
    (["--temperature", "nan"], "--temperature (field temperature): must be"),
    (["--top-p", "1.5"], "top_p"),
])
def test_generate_mistakes_are_one_line(lm_run, args, words):
    result = aiayn("generate", "--checkpoint", str(lm_run), "--prompt", "a", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr and words in result.stderr, result.stderr


def test_a_translation_checkpoint_points_to_translate(trained_run, lm_run):
    result = aiayn("generate", "--checkpoint", str(trained_run), "--prompt", "a b")
    assert result.returncode == 2 and "use aiayn translate" in result.stderr
    result = aiayn("translate", "--checkpoint", str(lm_run), stdin="a b\n")
    assert result.returncode == 2 and "use aiayn generate" in result.stderr
