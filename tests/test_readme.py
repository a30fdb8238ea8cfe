"""The README's Python tour runs as written, and its claims about the two models' logits hold."""

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


def test_readme_parameter_table_matches_count_parameters():
    from aiayn import ModelConfig, count_parameters

    text = README.read_text(encoding="utf-8")
    for preset in ("tiny", "small", "base", "big"):
        count = count_parameters(ModelConfig.preset(preset, vocab_size=37000))
        assert f"| {preset} |" in text and f"{count:,}" in text, preset
