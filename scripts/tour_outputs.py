"""Run every code block of a tour (docs/tour.md, docs/tour.zh.md) in order, in one fresh Python, and write
what each block printed under it as comments (``# Output:`` then one ``# line`` per printed line), so a
reader sees the expected output without running anything. ``tests/test_tour.py`` checks the comments against
a fresh run (numbers may differ from machine to machine; the words, the True/False and the shapes may not).

    python scripts/tour_outputs.py docs/tour.md docs/tour.zh.md      # (make notebook runs it)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)
HEADER = "# Output:"


def marker(i: int) -> str:
    return f"=== tour block {i} ==="


def code_of(block: str) -> str:
    """A block without its output comments."""
    return block.split(HEADER)[0].rstrip() + "\n"


def outputs_by_block(blocks: list[str], folder: str | None = None, timeout: float = 600) -> list[list[str]]:
    """What each block printed, running them in order in one fresh Python in ``folder`` (default: an empty
    temporary one)."""
    program = "\n\n".join(f"{code_of(b)}\nprint({marker(i)!r}, flush=True)" for i, b in enumerate(blocks))
    with tempfile.TemporaryDirectory() as temporary:
        result = subprocess.run([sys.executable, "-c", program], cwd=folder or temporary, capture_output=True,
                                text=True, timeout=timeout)
    if result.returncode != 0:
        raise SystemExit(f"a tour block failed:\n{result.stderr[-3000:]}")
    found, lines = [], []
    for line in result.stdout.splitlines():
        if line == marker(len(found)):
            found.append(lines)
            lines = []
        else:
            lines.append(line.rstrip())
    return found


def with_outputs(text: str) -> str:
    """The tour with each block's output comments made afresh."""
    blocks = BLOCK.findall(text)
    outputs = iter(outputs_by_block(blocks))

    def rewrite(match: re.Match) -> str:
        printed = next(outputs)
        comments = "".join(f"# {line}".rstrip() + "\n" for line in printed)
        return f"```python\n{code_of(match.group(1))}" + (f"{HEADER}\n{comments}" if printed else "") + "```"

    return BLOCK.sub(rewrite, text)


def main() -> None:
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(with_outputs(path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote the outputs of {path}'s blocks")


if __name__ == "__main__":
    main()
