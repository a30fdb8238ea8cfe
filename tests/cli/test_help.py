"""The five most used commands end their --help with examples, and every example is a command line the parser
takes as written."""

import pytest

from aiayn.cli.main import build_parser

from conftest import parses

MOST_USED = ["train", "translate", "generate", "chat", "serve"]


def command_lines(help_text: str) -> list[str]:
    """The example lines of a --help (after "examples:"), each without a leading ``echo ... |``."""
    lines = help_text.split("examples:\n", 1)[1].splitlines()
    return [line.strip().split("| ", 1)[-1] for line in lines if line.strip()]


@pytest.mark.parametrize("command", MOST_USED)
def test_the_help_ends_with_examples_that_parse(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "person.json").write_text('{"type": "object"}')  # the file an example names (read as it parses)
    with pytest.raises(SystemExit):
        build_parser("test").parse_args([command, "--help"])
    found = command_lines(capsys.readouterr().out)
    assert len(found) >= 3, found
    for line in found:
        assert line.startswith(f"aiayn {command} "), line
        parses(line)


def test_a_wrong_example_would_fail(capsys):
    with pytest.raises(SystemExit) as stop:
        parses("aiayn train --no-such-flag 1")
    assert stop.value.code == 2 and "--no-such-flag" in capsys.readouterr().err
