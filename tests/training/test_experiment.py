"""Experiments: variants of one recipe trained under one budget, a table and curves; interrupted experiments
resume; bad files are one-line errors."""

import json

import pytest

from aiayn.cli import main
from aiayn.training.experiment import read_experiment, variant_config

RECIPE = {"data": "reverse", "preset": "tiny", "synthetic_size": 300, "vocab_size": 300, "max_tokens": 512,
          "schedule": "inverse_sqrt", "lr": 0.003, "warmup": 5, "eval_every": 5, "keep_last": 0, "log_every": 5,
          "bleu_sentences": 20, "model": {"dropout": 0.0}}


@pytest.fixture
def experiment(tmp_path):
    import yaml

    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(RECIPE))
    spec = {"recipe": str(tmp_path / "recipe.yaml"), "changes": {"max_steps": 10}, "output": str(tmp_path / "out"),
            "long_valid": 0.2, "variants": {"base": {}, "one-head": {"model": {"n_heads": 1}},
                                            "pre": {"model": {"norm": "pre"}, "warmup": 1}},
            "groups": {"heads": ["base", "one-head"], "norm": ["base", "pre"]}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path / "exp.yaml"


def test_variants_merge_model_changes_into_the_recipe(experiment):
    spec = read_experiment(experiment)
    cfg = variant_config(spec, "pre")
    assert cfg.model == {"dropout": 0.0, "norm": "pre"} and cfg.warmup == 1 and cfg.max_steps == 10
    assert cfg.output.endswith("out/pre") and variant_config(spec, "base").warmup == 5
    assert variant_config(spec, "base", "/corpora/m30k").data_dir == "/corpora/m30k"  # --data-dir


def test_an_experiment_trains_every_variant_writes_the_table_and_resumes(experiment, tmp_path, capsys):
    import yaml

    assert main(["experiment", str(experiment), "--only", "base", "one-head"]) == 0
    out = tmp_path / "out"
    rows = json.loads((out / "results.json").read_text())
    assert [r["variant"] for r in rows] == ["base", "one-head"] and all(r["steps"] == 10 for r in rows)
    assert all(r["best_valid_bleu"] is not None and "long_valid_bleu" in r for r in rows)
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| variant |") and len(table) == 4 and "one-head" in table[3]
    assert "valid BLEU at step 10 |" in table[0]  # the last step both variants reached
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "questions.png").stat().st_size > 1000  # groups: one panel per question
    first = (out / "base" / "result.json").read_text()
    (out / "one-head" / "result.json").unlink()  # as if interrupted after its last checkpoint
    assert main(["experiment", str(experiment)]) == 0  # one-head resumes, pre trains, base is left alone
    assert (out / "base" / "result.json").read_text() == first
    assert [r["variant"] for r in json.loads((out / "results.json").read_text())] == ["base", "one-head", "pre"]
    spec = yaml.safe_load(experiment.read_text())  # an edited file may not change what an unfinished run is
    spec["variants"]["pre"]["warmup"] = 3
    experiment.write_text(yaml.safe_dump(spec))
    (out / "pre" / "result.json").unlink()
    assert main(["experiment", str(experiment), "--only", "pre"]) == 2
    assert "warmup: run has 1, asked 3" in capsys.readouterr().err


def test_a_variant_stopped_midway_resumes_from_its_last_checkpoint(experiment, tmp_path):
    """docs/experiments.md: a variant with a ``last/`` checkpoint and no result resumes from it (not afresh)."""
    import yaml

    spec = yaml.safe_load(experiment.read_text())
    spec["changes"]["max_steps"] = 5
    experiment.write_text(yaml.safe_dump(spec))
    assert main(["experiment", str(experiment), "--only", "base"]) == 0
    run = tmp_path / "out" / "base"
    (run / "result.json").unlink()  # as if stopped at step 5 of 10: last/ holds step 5, no result yet
    with (run / "metrics.jsonl").open("a") as log:
        log.write(json.dumps({"step": 0, "note": "kept by a resume, gone after a fresh start"}) + "\n")
    spec["changes"]["max_steps"] = 10
    experiment.write_text(yaml.safe_dump(spec))
    assert main(["experiment", str(experiment), "--only", "base"]) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("note" in x for x in lines), "the variant started afresh"
    assert [x["step"] for x in lines if "valid_loss" in x] == [5, 10]
    assert json.loads((run / "result.json").read_text())["steps"] == 10


@pytest.mark.parametrize("content, words", [("variants: {}\nrecipe: r\noutput: o\n", "give at least one"),
                                            ("colour: red\n", "unknown key(s) colour"),
                                            ("variants: {a: {}}\noutput: o\n", "recipe: missing"),
                                            ("variants: {a: {}}\nrecipe: r\noutput: o\ngroups: {q: [a, b]}\n",
                                             "groups: q: give a non-empty list of the file's variants")])
def test_bad_experiment_files_are_one_line_errors(tmp_path, capsys, content, words):
    (tmp_path / "e.yaml").write_text(content)
    assert main(["experiment", str(tmp_path / "e.yaml")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def _table3_spec() -> dict:
    """experiments/table3.yaml, its recipe path made absolute (the tests run from anywhere)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = read_experiment(root / "experiments" / "table3.yaml")
    spec["recipe"] = str(root / spec["recipe"])
    return spec


def test_every_variant_of_the_table3_experiment_is_a_valid_recipe():
    from aiayn.model.config import ModelConfig

    spec = _table3_spec()
    assert set(spec["variants"]) == {n for names in spec["groups"].values() for n in names}  # every row in a picture
    for name in spec["variants"]:
        cfg = variant_config(spec, name)
        ModelConfig.preset(cfg.preset, **cfg.model)  # the model each variant asks for can be built
        assert cfg.time_limit_min == 8 and cfg.output.endswith(f"table3/{name}")


def test_the_table3_base_is_the_papers_model_whatever_the_recipe_has_become():
    spec = _table3_spec()
    base = variant_config(spec, "base")
    assert base.model["norm"] == "post" and base.model["positions"] == "sinusoidal"
    assert base.model["dropout"] == 0.1 and base.model["attention_dropout"] is None
    assert (base.schedule, base.lr, base.warmup, base.vocab_size) == ("inverse_sqrt", 0.0012, 200, 8000)
    pre, rope = variant_config(spec, "pre-norm"), variant_config(spec, "rope")
    assert pre.model["norm"] == "pre" and pre.model["positions"] == "sinusoidal"
    assert rope.model["positions"] == "rope" and rope.model["norm"] == "post"


def test_a_question_is_drawn_once_two_of_its_variants_are_done(tmp_path, monkeypatch):
    """questions.png: one panel per group with two or more variants done; a lone curve answers nothing."""
    from aiayn.training import experiment as module

    drawn = []
    monkeypatch.setattr("aiayn.visual.figures.save_figure", lambda fig, path: drawn.append(
        {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in fig.axes if ax.get_visible()}))
    rows = [{"variant": v, "curve": [[5, 1.0, 3.0], [10, 2.0, 2.5]]} for v in ("base", "one-head", "key")]
    groups = {"heads": ["base", "one-head", "eight"], "keys": ["base", "key"], "norm": ["base", "pre"]}
    module.plot_groups(rows, groups, tmp_path / "q.png")
    assert drawn == [{"heads": ["base", "one-head"], "keys": ["base", "key"]}]
    assert module.plot_groups(rows[:1], groups, tmp_path / "q.png") is None and len(drawn) == 1
