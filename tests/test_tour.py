"""The guided tour cannot rot: every code block of docs/tour.md (as notebooks/tour.ipynb, made from it) and of
docs/tour.zh.md runs, in order, and prints the seeds' worked examples (SPEC section 5) to 6 decimals."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = {  # SPEC section 5, in the order the tour prints them
    "example 1: the soft look-up gives 8": [8.0],
    "example 2: softmax(X X^T) X": [1, 2.957691, 2.011295, 1, 1.540148, 2.722573, 1, 2.864164, 2.000000],
    "example 3: PE, base 100": [0, 1, 0, 1, 0.841471, 0.540302, 0.099833, 0.995004, 0.909297, -0.416147, 0.198669,
                                0.980067, 0.141120, -0.989992, 0.295520, 0.955336],
    "example 4: PE, base 10000": [0, 1, 0, 1, 0.841471, 0.540302, 0.010000, 0.999950, 0.909297, -0.416147,
                                  0.019999, 0.999800],
}
CHECKS = {  # what else each tour must print (its own language)
    "tour.md": ["above the diagonal, exactly 0: True", "cached steps equal the full pass: True",
                "GPT: the first 6 positions ignore the future: True", "BERT: every position sees the whole text: True",
                "position 3 alone gives the same: True", "GQA cache is 4x smaller: True",
                "GQA cached steps equal its full pass: True"],
    "tour.zh.md": ["对角线以上恰好为 0： True", "逐步使用缓存与一次算完结果相同： True",
                   "GPT：前 6 个位置不受未来影响： True", "BERT：每个位置都看到整段文本： True",
                   "单独算第 3 个位置，结果相同： True", "GQA 缓存小 4 倍： True",
                   "GQA 逐步使用缓存与一次算完相同： True"],
}


def blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / name).read_text(encoding="utf-8"), flags=re.S)


def check_numbers(printed: str) -> None:
    """Every SPEC example appears, as a run of numbers with 6 decimals, in what was printed."""
    numbers = re.findall(r"-?\d+\.\d{6}(?!\d)", printed)
    for example, values in SPEC.items():
        want = [f"{v:.6f}" for v in values]
        assert any(numbers[i: i + len(want)] == want for i in range(len(numbers))), example


def check_output(name: str, printed: str, folder: Path) -> None:
    check_numbers(printed)
    for line in CHECKS[name]:
        assert line in printed, line
    copied = re.search(r"1000 (?:steps|步).*?(\d+)%", printed)
    assert copied and int(copied.group(1)) >= 90, "the copy task is learnt in the tour's 1000 steps"
    assert (folder / "cross_attention.png").read_bytes()[:4] == b"\x89PNG"


def test_every_block_of_the_chinese_tour_runs_and_prints_the_seeds_numbers(tmp_path):
    """(The English tour's blocks run as the notebook, below: the same cells, checked the same way.)"""
    code = "\n\n".join(blocks("tour.zh.md"))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    check_output("tour.zh.md", result.stdout, tmp_path)


def test_both_tours_run_the_same_code():
    """The Chinese tour is the same tour: block by block, the same statements (comments and printed labels may
    differ)."""
    def statements(block: str) -> list[str]:
        code = [re.sub(r"\s+#.*$", "", line) for line in block.splitlines()]
        return [re.sub(r'(f?)"[^"]*"', r'\1""', line) for line in code if line.strip()]
    en, zh = blocks("tour.md"), blocks("tour.zh.md")
    assert len(en) == len(zh) == 17
    assert [statements(b) for b in en] == [statements(b) for b in zh]


def test_the_notebook_is_made_from_the_english_tour_and_every_block_runs(tmp_path):
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "notebooks" / "tour.ipynb", as_version=4)
    made = jupytext.read(ROOT / "docs" / "tour.md")
    assert [(c.cell_type, c.source) for c in notebook.cells] == [(c.cell_type, c.source) for c in made.cells], \
        "notebooks/tour.ipynb is out of date: run `make notebook`"
    assert "pip" in notebook.cells[[c.cell_type for c in notebook.cells].index("code")].source  # Colab: one cell
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    check_output("tour.md", printed, tmp_path)
