"""A run's decoding defaults: the recipe's ``decoding:`` goes into every checkpoint as ``generation.json``;
translate, evaluate and serve use it unless a flag (or a request field) says otherwise; average keeps it;
``evaluate --json`` reports the options it used; a checkpoint without one decodes with the defaults."""

import json

import pytest

from aiayn.decoding.config import DecodingConfig
from aiayn.inference.translator import Translator
from aiayn.io.checkpoint import GENERATION
from tiny_runs import write_recipe

from conftest import run_main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decoding")
    recipe = write_recipe(tmp, "run", max_steps=10, eval_every=5, keep_last=2,
                          decoding={"beam_size": 3, "length_penalty": 0.6})
    result = run_main("train", "--config", str(recipe))
    assert result.returncode == 0, result.stderr[-2000:]
    return tmp / "run"


def _evaluate(run, tmp_path, *flags):
    (tmp_path / "src.txt").write_text("a b c\nd e f g\n")
    result = run_main("evaluate", "--checkpoint", str(run), "--src", str(tmp_path / "src.txt"), "--ref",
                      str(tmp_path / "src.txt"), "--json", *flags)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["decoding"]


def test_every_checkpoint_of_the_run_carries_the_recipes_decoding(run):
    for folder in (run / "best", run / "last", *sorted((run / "checkpoints").iterdir())):
        assert json.loads((folder / GENERATION).read_text()) == {"beam_size": 3, "length_penalty": 0.6}


def test_translate_and_evaluate_use_it_unless_a_flag_says_otherwise(run, tmp_path):
    used = _evaluate(run, tmp_path)
    assert (used["beam_size"], used["length_penalty"]) == (3, 0.6)
    used = _evaluate(run, tmp_path, "--beam-size", "2")
    assert (used["beam_size"], used["length_penalty"]) == (2, 0.6)
    assert Translator.from_checkpoint(run).decoding == DecodingConfig(beam_size=3, length_penalty=0.6)


def test_average_keeps_it_and_an_old_checkpoint_decodes_with_the_defaults(run, tmp_path, trained_run):
    from aiayn.cli import main

    assert main(["average", "--run", str(run), "--output", str(tmp_path / "avg")]) == 0
    assert DecodingConfig.load(tmp_path / "avg") == DecodingConfig(beam_size=3, length_penalty=0.6)
    assert not (trained_run / "best" / GENERATION).exists()
    assert _evaluate(trained_run, tmp_path) == DecodingConfig().to_dict()


def test_the_server_uses_it_and_a_request_may_change_it(run):
    from fastapi.testclient import TestClient

    from aiayn.serve.server import create_app

    with TestClient(create_app(Translator.from_checkpoint(run))) as client:
        assert client.get("/health").json()["decoding"]["length_penalty"] == 0.6
        ok = client.post("/translate", json={"text": "a b c", "beam_size": 2, "length_penalty": 1.0})
        assert ok.status_code == 200
        for bad in ({"length_penalty": -1}, {"top_k": -2}, {"beam_size": 99}, {"num_return_sequences": 2},
                    {"alpha": 0.6}, {"temperature": "hot"}):
            answer = client.post("/translate", json={"text": "a b c", **bad})
            assert answer.status_code == 422, (bad, answer.text)
        refused = client.post("/translate", json={"text": "a", "length_penalty": -1})  # the schema's bound (>= 0)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "length_penalty"]


def test_the_default_length_policy_caps_each_translation_at_1_5_times_its_source_plus_10(trained_run, tmp_path):
    """docs/decoding.md: without generation.json a translator decodes with beam 4, length penalty 1.0 and at
    most int(1.5 * source tokens + 10) new tokens per sentence (a model that never ends shows the cap)."""
    import torch

    from aiayn import generate
    from aiayn.inference.load import load_checkpoint
    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.transformer import EncoderDecoder

    trained, tokenizers = load_checkpoint(trained_run)
    torch.manual_seed(0)
    model = EncoderDecoder(trained.config.replace(output_bias=True)).eval()
    with torch.no_grad():
        model.output.bias[model.config.eos_id] = float("-inf")  # never ends by itself: only the cap stops it
    write_checkpoint(tmp_path / "never-ends", model, tokenizers)
    translator = Translator.from_checkpoint(tmp_path / "never-ends")
    texts = ["a b", "c d e f g h i", "j"]
    rows = [tokenizers.src.encode(t) for t in texts]
    expected = []
    for row in rows:
        ids = generate(model, torch.tensor([row]), "beam", beam_size=4, length_penalty=1.0, max_len_a=1.5,
                       max_len_b=10)[0]
        assert len(ids) == int(1.5 * len(row) + 10)
        expected.append(tokenizers.tgt.decode(ids))
    assert translator.translate(texts) == expected


def test_a_logit_bias_from_the_command_line_or_generation_json_moves_the_text(lm_run, tmp_path):
    """``aiayn generate --logit-bias JSON`` (a token pushed by 100 is every token written), the same key in a
    checkpoint's generation.json, and a bias that is not one refused in one line naming it (exit 2)."""
    import json
    import shutil

    from aiayn.inference.generator import TextGenerator

    from conftest import run_main

    generator = TextGenerator.from_checkpoint(lm_run)
    pushed = generator.tokenizer.encode("d")[0]
    bias = json.dumps({str(pushed): 100})
    args = ["generate", "--checkpoint", str(lm_run), "--prompt", "the cat ", "--max-new-tokens", "5",
            "--temperature", "0"]
    done = run_main(*args, "--logit-bias", bias)
    assert done.returncode == 0 and done.stdout.rstrip("\n").endswith("ddddd"), done
    kept = tmp_path / "kept"
    shutil.copytree(lm_run / "best", kept)
    (kept / "generation.json").write_text(json.dumps({"logit_bias": bias}))
    assert run_main(*args[:2], str(kept), *args[3:]).stdout == done.stdout
    bad = run_main(*args, "--logit-bias", '{"d": 1}')
    assert bad.returncode == 2 and "logit_bias" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad
