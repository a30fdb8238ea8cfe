"""``DecodingConfig``: one name per option end to end, checked where it is defined; a checkpoint carries its
decoding defaults (``generation.json``) and the products use them unless told otherwise."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiayn.decoding.config import DecodingConfig, names
from aiayn.io.checkpoint import GENERATION

SRC = Path(__file__).resolve().parents[2] / "src" / "aiayn"


@pytest.mark.parametrize("field, bad", [("beam_size", 0), ("beam_size", 2.5), ("length_penalty", -0.1),
                                        ("length_penalty", math.inf), ("max_len_a", math.nan), ("max_len_b", -1),
                                        ("max_new_tokens", 0), ("min_new_tokens", -1), ("temperature", -1.0),
                                        ("temperature", math.nan), ("top_k", -2), ("top_p", 0.0), ("top_p", 1.5),
                                        ("seed", -1), ("seed", 2**53), ("num_return_sequences", 0),
                                        ("strategy", "typical"), ("beam_size", True)])
def test_every_field_checks_itself_and_the_error_names_it(field, bad):
    with pytest.raises(ValueError, match=f"^{field}: must be"):
        DecodingConfig(**{field: bad})
    with pytest.raises(ValueError, match=f"^{field}: must be"):
        DecodingConfig().replace(**{field: bad})


@given(st.integers(1, 64), st.floats(0, 5), st.integers(0, 100), st.floats(0.01, 1.0))
def test_valid_values_pass_and_round_trip_through_changes(beam, penalty, top_k, top_p):
    cfg = DecodingConfig(beam_size=beam, length_penalty=penalty, top_k=top_k, top_p=top_p)
    assert DecodingConfig().replace(**cfg.changes()) == cfg
    assert hash(cfg) == hash(DecodingConfig(**cfg.to_dict()))  # frozen: batched by equal configs


def test_unknown_options_and_impossible_combinations_are_errors():
    with pytest.raises(ValueError, match="alpha: not a decoding option"):
        DecodingConfig().replace(alpha=0.6)
    with pytest.raises(ValueError, match="num_return_sequences: at most beam_size=2"):
        DecodingConfig(strategy="beam", beam_size=2, num_return_sequences=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DecodingConfig().beam_size = 3


def test_generation_json_is_read_and_checked(tmp_path):
    assert DecodingConfig.load(tmp_path) == DecodingConfig()  # none: the defaults
    (tmp_path / GENERATION).write_text(json.dumps({"beam_size": 12, "length_penalty": 1.4}))
    assert DecodingConfig.load(tmp_path) == DecodingConfig(beam_size=12, length_penalty=1.4)
    (tmp_path / GENERATION).write_text(json.dumps({"beam_size": 0}))
    with pytest.raises(ValueError, match=r"generation.json: beam_size: must be"):
        DecodingConfig.load(tmp_path)
    (tmp_path / GENERATION).write_text("{broken")
    with pytest.raises(ValueError, match=r"generation\.json: damaged"):
        DecodingConfig.load(tmp_path)


def test_the_command_line_and_http_options_are_the_fields():
    from aiayn.cli.main import build_parser
    from aiayn.serve.generate import GenerateRequest
    from aiayn.serve.translate import TranslateRequest

    parser = build_parser("test")
    for command in ("translate", "evaluate", "generate", "distill", "serve"):
        sub = parser._subparsers._group_actions[0].choices[command]
        dests = {a.dest for a in sub._actions}
        wanted = set(names()) - ({"max_new_tokens"} if command == "serve" else set())  # serve's is a limit
        assert wanted <= dests, (command, wanted - dests)
        flags = {s for a in sub._actions for s in a.option_strings}
        assert "--length-penalty" in flags and "--alpha" not in flags
    for model in (TranslateRequest, GenerateRequest):
        assert set(names()) <= set(model.model_fields)


def test_length_penalty_walks_from_the_cli_and_http_to_the_beam_through_three_files():
    """The command line and the server generate their options from the config and pass it on whole: only
    the config, the entry to the strategies and the beam search name the option."""
    naming = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
                    if re.search(r"\blength_penalty\b", p.read_text(encoding="utf-8")))
    walk = [p for p in naming if p.split("/")[0] in ("cli", "serve", "inference", "decoding")]
    assert walk == ["decoding/beam.py", "decoding/config.py", "decoding/generation.py"], naming
    assert not any(re.search(r"\balpha\b", (SRC / p).read_text()) for p in ("cli/common.py", "serve/translate.py",
                                                                               "inference/translator.py"))


def test_one_resolve_chooses_the_strategy_for_every_model():
    """The product's defaults, chosen in one place: mask-predict for a CMLM, beam for translation with a beam, sampling
    for a language model with a temperature, else greedy; what the model cannot run is an error naming the field;
    no other module chooses a default strategy."""
    from aiayn.model.config import ModelConfig

    mt, lm = ModelConfig.preset("tiny"), ModelConfig.preset("tiny", arch="decoder-only")
    cmlm, bert = mt.replace(kind="cmlm"), ModelConfig.preset("tiny", arch="encoder-only")
    cases = [(mt, {}, "beam"), (mt, {"beam_size": 1}, "greedy"),
             (mt, {"strategy": "sample", "temperature": 0}, "greedy"), (lm, {}, "sample"),
             (lm, {"temperature": 0}, "greedy"), (lm, {"strategy": "beam"}, "beam"), (cmlm, {}, "mask-predict")]
    for model, options, strategy in cases:
        resolved = DecodingConfig(**options).resolve(model)
        assert resolved.strategy == strategy, (model.arch, options)
        assert resolved.resolve(model) == resolved  # resolving twice changes nothing
    assert DecodingConfig().resolve(lm).max_new_tokens == 200 and DecodingConfig().resolve(mt).max_new_tokens is None
    refused = [(lm, {"strategy": "mask-predict"}, "strategy"), (cmlm, {"strategy": "greedy"}, "strategy"),
               (bert, {}, "strategy"), (lm, {"temperature": 0, "num_return_sequences": 2}, "num_return_sequences"),
               (mt, {"json_schema": "{}"}, "json_schema")]
    for model, options, field in refused:
        with pytest.raises(ValueError, match=f"^{field}: "):
            DecodingConfig(**options).resolve(model)
    choosers = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
                      if re.search(r'"mask-predict" if|"beam" if|"sample" if', p.read_text(encoding="utf-8")))
    assert choosers == ["decoding/config.py"], choosers


def test_the_bounds_the_http_schema_states_are_the_rules():
    """``BOUNDS`` (what /openapi.json says of each decoding field) agrees with the checks: a value on a bound
    passes, one beyond it is refused."""
    from aiayn.decoding.config import BOUNDS, _problem

    for name, bounds in BOUNDS.items():
        for key, edge in bounds.items():
            if key == "max_length":
                assert _problem(name, "a" * edge) is None and _problem(name, "a" * (edge + 1)), name
            elif key == "pattern":
                assert re.search(edge, "<2de> x") and _problem(name, "<2de> x") is None, name
                assert not re.search(edge, " x") and _problem(name, " x"), name
            elif key == "min_length":
                assert _problem(name, "a" * edge) is None and _problem(name, ""), name
            elif key == "gt":
                assert _problem(name, edge) and _problem(name, edge + 1e-6) is None, name
            else:
                inside = edge if key in ("ge", "le") else None
                beyond = edge - 1 if key == "ge" else edge + 1
                if isinstance(edge, float) or name in ("top_p",):
                    beyond = edge - 0.5 if key == "ge" else edge + 0.5
                assert _problem(name, inside) is None and _problem(name, beyond), (name, key)
