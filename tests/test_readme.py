"""The README: short, its Python tour runs as written, and every aiayn command in it is one the parser takes."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_tour_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README has a python block"
    check = ("\nassert logits.shape == (2, 7, 8000)\n"
             "assert torch.allclose(two_steps, logits, atol=1e-5), 'encode + decode give the same logits'\n")
    result = subprocess.run([sys.executable, "-c", blocks[0] + check], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()


def test_the_parameter_table_matches_count_parameters():
    from aiayn import ModelConfig, count_parameters

    text = (README.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for preset in ("tiny", "small", "base", "big"):
        count = count_parameters(ModelConfig.preset(preset, vocab_size=37000))
        rows = [line.strip() for line in text.splitlines() if line.strip().startswith(f"| {preset} |")]
        assert len(rows) == 1 and rows[0].split("|")[-2].split()[0] == f"{count:,}", (preset, count, rows)


def test_the_readme_is_short_and_every_command_in_it_parses():
    from conftest import parses

    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    commands = [part.split("#")[0].strip() for block in blocks for line in block.splitlines()
                for part in line.split("&&") if "aiayn " in part.split("#")[0]]
    assert len(commands) >= 20, commands  # learn, train, run, adapt, serve, go bigger: 3-5 each
    for command in commands:
        parses(command.split("| ", 1)[-1])
