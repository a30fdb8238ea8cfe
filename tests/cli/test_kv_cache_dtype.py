"""``--kv-cache-dtype int8`` on the commands that decode a language model, and ``load_product``'s (the server's)."""

import torch

from conftest import run_main


def test_generate_and_the_server_decode_on_an_int8_cache_the_float_caches_text(lm_run):
    """The trained tiny model's greedy text on the int8 cache is the float cache's (its margins are wide); the flag
    reaches the server's model; a dtype it does not know is refused by argparse (exit 2)."""
    from aiayn.serve.server import load_product

    args = ["generate", "--checkpoint", str(lm_run), "--prompt", "the cat ", "--max-new-tokens", "24",
            "--temperature", "0", "--compile", "off"]
    plain, int8 = run_main(*args), run_main(*args, "--kv-cache-dtype", "int8")
    assert plain.returncode == int8.returncode == 0 and plain.stdout.strip() and int8.stdout == plain.stdout, int8
    product, _ = load_product(str(lm_run), kv_cache_dtype="int8")
    assert product.model.runtime.kv_cache_dtype == torch.int8
    assert product.generate("the cat ", 24, strategy="greedy")[0] == plain.stdout.rstrip("\n")
    bad = run_main(*args, "--kv-cache-dtype", "fp8")
    assert bad.returncode == 2 and "--kv-cache-dtype" in bad.stderr


def test_translate_on_an_int8_cache_gives_the_float_caches_translations(trained_run):
    """The reverse-task translator (an encoder-decoder: its decoder's self-attention cache in int8, the encoder's
    keys and values as they were) translates greedy and beam as on the float cache."""
    args = ["translate", "--checkpoint", str(trained_run)]
    for strategy in (["--beam-size", "1"], ["--beam-size", "4"]):
        plain = run_main(*args, *strategy, stdin="a b c d e\nj i h g f\n")
        int8 = run_main(*args, *strategy, "--kv-cache-dtype", "int8", stdin="a b c d e\nj i h g f\n")
        assert plain.returncode == int8.returncode == 0 and plain.stdout.strip() and int8.stdout == plain.stdout, int8
