"""The guided tour cannot rot: every code block of docs/tour.md (as notebooks/tour.ipynb, made from it) and of
docs/tour.zh.md runs, in order, prints the four worked examples to 6 decimals, and prints what the block's
``# Output:`` comments show (scripts/tour_outputs.py writes them).

Both tours train the same two copy models (the same calls, blocks 16 and 23): the notebook's training keeps
them, and the Chinese tour's ``train_copy`` hands them back with the random state the training left
(``KEEP_COPY_MODELS``, a first cell in each)."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("tour_outputs", ROOT / "scripts" / "tour_outputs.py")
tour_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tour_outputs)
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
                "GQA cached steps equal its full pass: True",
                "60 positions through the rings equal the whole pass: True", "their weights sum to 1: True",
                "the output greedy gives: True"],
    "tour.zh.md": ["对角线以上恰好为 0： True", "逐步使用缓存与一次算完结果相同： True",
                   "GPT：前 6 个位置不受未来影响： True", "BERT：每个位置都看到整段文本： True",
                   "单独算第 3 个位置，结果相同： True", "GQA 缓存小 4 倍： True",
                   "GQA 逐步使用缓存与一次算完相同： True",
                   "60 个位置经过环形缓存与一次算完相同： True", "它们的权重之和为 1： True",
                   "与贪心解码的输出相同： True"],
}


KEEP_COPY_MODELS = """import hashlib, os, safetensors.torch, torch, aiayn.training.demo
from aiayn import TransformerModel, load_model

def _train_copy_once(recipe=aiayn.training.demo.CopyRecipe(), progress=True, _train=aiayn.training.demo.train_copy):
    kept = os.path.join({folder!r}, hashlib.sha1(repr(recipe).encode()).hexdigest())
    if os.path.isdir(kept):  # trained by the other tour: the same model, the same random state after it
        torch.set_rng_state(safetensors.torch.load_file(kept + ".rng.safetensors")["rng"])
        return load_model(kept)
    model = _train(recipe, progress)
    model.save(kept)
    safetensors.torch.save_file({{"rng": torch.get_rng_state()}}, kept + ".rng.safetensors")
    return model

aiayn.training.demo.train_copy = _train_copy_once
"""


def blocks(name: str) -> list[str]:
    return tour_outputs.BLOCK.findall((ROOT / "docs" / name).read_text(encoding="utf-8"))


def shown(block: str) -> list[str]:
    """The output a block's comments show (after ``# Output:``)."""
    _, _, comments = block.partition(tour_outputs.HEADER + "\n")
    return [line.removeprefix("#").removeprefix(" ") for line in comments.splitlines()]


def check_shown_outputs(name: str, printed: list[list[str]]) -> None:
    """Each block printed what its comments show; numbers may differ (another CPU trains the copy models a
    little differently), everything else may not. Run scripts/tour_outputs.py after changing a block."""
    def words(lines: list[str]) -> list[str]:  # numbers, and which near-certain tokens Mask-Predict re-masks
        numbers = [re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", line).rstrip() for line in lines]
        return [re.sub(r"\[N\]|(?<![\[\w]) N (?![\]\w])", "<N>", line) for line in numbers]
    documented = [shown(b) for b in blocks(name)]
    assert len(printed) == len(documented)
    for i, (got, want) in enumerate(zip(printed, documented, strict=True)):
        assert words(got) == words(want), f"{name}, block {i + 1}: run `python scripts/tour_outputs.py docs/{name}`"


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
    parallel = re.search(r"CMLM.*?(\d+)%", printed)
    assert parallel and int(parallel.group(1)) >= 90, "the CMLM copies in one parallel pass after 1000 steps"
    assert (folder / "cross_attention.png").read_bytes()[:4] == b"\x89PNG"


def test_both_tours_run_the_same_code():
    """The Chinese tour is the same tour: block by block, the same statements (comments and printed labels may
    differ)."""
    def statements(block: str) -> list[str]:
        code = [re.sub(r"\s+#.*$", "", line) for line in tour_outputs.code_of(block).splitlines()]
        return [re.sub(r'(f?)"[^"]*"', r'\1""', line) for line in code if line.strip() and line[0] != "#"]
    en, zh = blocks("tour.md"), blocks("tour.zh.md")
    assert len(en) == len(zh) == 27
    assert [statements(b) for b in en] == [statements(b) for b in zh]


def test_the_notebook_is_made_from_the_english_tour():
    import jupytext
    import nbformat

    notebook = nbformat.read(ROOT / "notebooks" / "tour.ipynb", as_version=4)
    made = jupytext.read(ROOT / "docs" / "tour.md")
    assert [(c.cell_type, c.source) for c in notebook.cells] == [(c.cell_type, c.source) for c in made.cells], \
        "notebooks/tour.ipynb is out of date: run `make notebook`"
    assert "pip" in notebook.cells[[c.cell_type for c in notebook.cells].index("code")].source  # Colab: one cell


def notebook_outputs(folder: Path, first_cell: str) -> list[str]:
    """What each code cell of notebooks/tour.ipynb printed, run in ``folder`` after ``first_cell``."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "notebooks" / "tour.ipynb", as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(first_cell))
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return ["".join(out.get("text", "") for out in cell.get("outputs", []) if out.get("name") == "stdout")
            for cell in notebook.cells[1:] if cell.cell_type == "code"]


@pytest.mark.long  # the tour trains its copy models for the demo's 2,000 steps
def test_every_block_of_both_tours_runs_and_prints_what_it_shows(tmp_path):
    """The English tour as the notebook, then the Chinese tour's blocks in one fresh Python, each in a folder of
    its own; both checked the same way."""
    first_cell = KEEP_COPY_MODELS.format(folder=str(tmp_path))
    english, chinese = tmp_path / "notebook", tmp_path / "zh"
    english.mkdir()
    chinese.mkdir()
    cells = notebook_outputs(english, first_cell)
    check_output("tour.md", "".join(cells), english)
    check_shown_outputs("tour.md", [cell.splitlines() for cell in cells])
    assert len(list(tmp_path.glob("*.rng.safetensors"))) == 2, "the notebook kept its two copy models"
    _, *printed = tour_outputs.outputs_by_block([first_cell, *blocks("tour.zh.md")], str(chinese), timeout=300)
    check_output("tour.zh.md", "\n".join("\n".join(lines) for lines in printed), chinese)
    check_shown_outputs("tour.zh.md", printed)
