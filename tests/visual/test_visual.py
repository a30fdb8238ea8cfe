"""Pictures: positional encodings, tensor shapes, attention maps, and the `aiayn show` commands."""


import pytest
import torch

from aiayn.inference.translator import Translator
from aiayn.model.config import ModelConfig
from aiayn.visual.attention import KINDS, attention_for, plot_attention
from aiayn.visual.positions import plot_positions, position_similarity
from aiayn.visual.shapes import format_table, symbol_sizes, trace_shapes

from conftest import run_main

aiayn = run_main  # the command, run in this process


def test_position_dot_products_depend_on_offset_only():
    sim = position_similarity(60, 32)
    for k in (1, 5, 17):
        assert torch.allclose(sim.diagonal(k)[:-1], sim.diagonal(k)[1:], rtol=0, atol=1e-9)  # constant diagonals
    assert torch.allclose(sim, sim.T, rtol=0, atol=1e-9)
    assert torch.allclose(sim.diagonal(), torch.full((60,), 16.0, dtype=torch.float64), rtol=0, atol=1e-9)  # d/2


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_positions_writes_the_format_asked(tmp_path, suffix, magic):
    out = plot_positions(16, 20, tmp_path / f"pe{suffix}")
    assert out.read_bytes().startswith(magic)
    assert [p.name for p in tmp_path.iterdir()] == [f"pe{suffix}"]  # no temp file left behind


def test_plot_relative_draws_random_tables_and_refuses_bad_sizes(tmp_path):
    from aiayn.visual.positions import plot_relative, relative_bias_table

    out = plot_relative(40, tmp_path / "rel.png", buckets=16, max_distance=32, heads=4)
    assert out.read_bytes().startswith(b"\x89PNG") and out.stat().st_size > 10_000
    encoder, decoder, origin = relative_bias_table(None, 16, 32, 4)
    assert encoder.bidirectional and not decoder.bidirectional and origin.startswith("random")
    assert encoder.table.weight.shape == (16, 4) and encoder.table.weight.std() > 0.5  # N(0, 1), not the init
    with pytest.raises(ValueError, match="--buckets even"):
        plot_relative(40, tmp_path / "bad.png", buckets=7)


def test_plot_positions_rejects_bad_output(tmp_path):
    with pytest.raises(ValueError, match="should end in"):
        plot_positions(16, 20, tmp_path / "pe.txt")
    with pytest.raises(ValueError, match="does not exist"):
        plot_positions(16, 20, tmp_path / "missing" / "pe.png")


@pytest.mark.parametrize("overrides", [{}, {"n_heads": 2, "d_ff": 96, "vocab_size": 333}])
def test_traced_shapes_match_their_symbols(overrides):
    config = ModelConfig.preset("tiny", **{"vocab_size": 1000, **overrides})
    sizes = symbol_sizes(config)
    stages = trace_shapes(config)
    assert len(stages) == 19
    for stage in stages:
        expected = tuple(sizes[s.strip()] for s in stage.symbols.split(","))
        assert stage.shape == expected, stage
    table = format_table(stages, config)
    assert "(2, 4, 7, 16)" in table if not overrides else "(2, 2, 7, 32)" in table


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_checkpoint(trained_run, beam_size=1)


def test_attention_maps_have_token_axes_and_are_distributions(translator):
    maps = attention_for(translator, "a b c d e")
    n_src, n_tgt = len(maps.source_tokens), len(maps.target_tokens)
    assert maps.translation == translator.translate(["a b c d e"])[0]
    assert maps.target_tokens[0] == "<s>"
    cfg = translator.model.config
    for kind in KINDS:
        rows, cols = maps.axes(kind)
        assert maps.weights[kind].shape == (cfg.n_decoder_layers, cfg.n_heads, len(rows), len(cols))
        assert torch.allclose(maps.weights[kind].sum(-1), torch.ones(()), atol=1e-5)
    assert maps.weights["cross"].shape[-2:] == (n_tgt, n_src)
    assert maps.weights["decoder_self"].triu(1).abs().max() == 0  # causal: no looking ahead
    data = maps.to_dict()
    assert len(data["attention"]["cross"][0][0]) == n_tgt and len(data["attention"]["cross"][0][0][0]) == n_src


def test_forced_target_is_used(translator):
    maps = attention_for(translator, "a b c", target="c b a x")
    assert maps.translation == "c b a x"
    assert len(maps.target_tokens) == 1 + len(translator.tokenizers.tgt.encode("c b a x"))


def test_plot_attention(translator, tmp_path):
    maps = attention_for(translator, "a b c")
    assert plot_attention(maps, tmp_path / "att.png").read_bytes().startswith(b"\x89PNG")
    assert plot_attention(maps, tmp_path / "cross.svg", ("cross",)).stat().st_size > 1000


def test_show_commands(trained_run, tmp_path):
    result = aiayn("show", "attention", "--checkpoint", str(trained_run), "a b c d", "--output",
                   str(tmp_path / "a.png"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("translation: ") and (tmp_path / "a.png").is_file()
    result = aiayn("show", "positions", "--d-model", "32", "--length", "50", "--output", str(tmp_path / "p.svg"))
    assert result.returncode == 0 and (tmp_path / "p.svg").is_file(), result.stderr
    result = aiayn("show", "shapes", "--preset", "small", "--output", str(tmp_path / "shapes.txt"))
    assert result.returncode == 0, result.stderr
    assert "(2, 4, 7, 64)" in result.stdout and (tmp_path / "shapes.txt").read_text() == result.stdout


def test_show_mistakes_are_one_line(trained_run, tmp_path):
    result = aiayn("show", "attention", "--checkpoint", str(trained_run), "a b", "--output", str(tmp_path / "a.jpgx"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--output" in result.stderr
    result = aiayn("show", "attention", "--checkpoint", str(tmp_path / "nothing"), "a b")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_attention_of_an_empty_sentence_is_a_clear_error(translator):
    with pytest.raises(ValueError, match="sentence: empty"):
        attention_for(translator, "   ")
