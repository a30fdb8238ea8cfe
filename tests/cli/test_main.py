"""The command line: help, the demo, and one-line errors for user mistakes."""

import subprocess
import sys

from aiayn.cli import main


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert "demo" in capsys.readouterr().out


def test_python_dash_m_runs_the_copy_demo_and_reports_accuracy():
    result = subprocess.run([sys.executable, "-m", "aiayn", "demo", "--task", "copy", "--steps", "30"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "exact match (greedy, 1000 new sequences):" in result.stdout
    assert "source [" in result.stdout


def test_numbers_demo_trains_translates_and_scores(tmp_path):
    result = subprocess.run([sys.executable, "-m", "aiayn", "demo", "--steps", "40", "--output", str(tmp_path / "d")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "test: sacreBLEU" in result.stdout and "nrefs:1|case:mixed" in result.stdout
    assert (tmp_path / "d" / "best" / "model.safetensors").is_file()


def test_bad_flag_value_is_one_line_and_exit_2(capsys):
    assert main(["demo", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "aiayn: error: --steps: must be a positive integer"
    assert "Traceback" not in err


def test_train_flags_come_from_the_recipe_fields_and_errors_name_the_flag(capsys):
    import dataclasses

    from aiayn.cli.common import flag
    from aiayn.cli.main import build_parser
    from aiayn.training.config import TrainConfig

    parser = build_parser("test")
    for f in dataclasses.fields(TrainConfig):
        if f.name not in ("model", "decoding"):  # mappings: recipe files only
            assert getattr(parser.parse_args(["train"]), f.name) is None  # only flags given override
    args = parser.parse_args(["train", "--label-smoothing", "0.2", "--no-joint-vocab", "--schedule", "noam"])
    assert (args.label_smoothing, args.joint_vocab, args.schedule) == (0.2, False, "noam")
    assert flag("time_limit_min") == "--time-limit-min"
    assert main(["train", "--data", "numbers", "--max-steps", "0", "--output", "unused"]) == 2
    assert capsys.readouterr().err.strip() == ("aiayn: error: aiayn train: --max-steps (field max_steps): must be "
                                               "a positive integer, got 0")
