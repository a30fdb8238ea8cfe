"""Every test the docs name exists: a claim's evidence cannot be renamed or deleted without the docs noticing."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def defined_tests() -> dict[str, set[str]]:
    """Test file (relative to tests/) -> the test functions it defines."""
    found = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        names = set(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), flags=re.M))
        found[path.relative_to(ROOT / "tests").as_posix()] = names
    return found


def cited(text: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(test files, bare test names, (file, name) pairs) named in ``text``."""
    pairs = re.findall(r"(?:tests/)?([\w/]*test_\w+\.py)::(test_\w+)", text)
    files = re.findall(r"tests/([\w/]+\.py)", text)
    names = re.findall(r"(?<![\w/.:])(test_(?!\d)\w+)(?![\w.(])", text)  # not data sets (test_2016_flickr)
    return files, names, pairs


def missing_in(text: str, tests: dict[str, set[str]]) -> list[str]:
    """What ``text`` names that tests/ lacks: files, bare test names, and ``file::test`` pairs with or without the
    tests/ prefix (a pair whose file does not exist is missing too)."""
    everywhere = set().union(*tests.values())
    files, names, pairs = cited(text)
    missing = [f"tests/{f}" for f in files if f not in tests] + [n for n in names if n not in everywhere]
    for file, name in pairs:
        owners = [f for f in tests if f == file or f.endswith("/" + file)]
        if not any(name in tests[f] for f in owners):
            missing.append(f"{file}::{name}")
    return missing


def test_every_test_file_and_test_the_docs_name_exists():
    tests = defined_tests()
    missing = [f"{doc.name}: {m}" for doc in DOCS for m in missing_in(doc.read_text(encoding="utf-8"), tests)]
    assert not missing, "named in the docs but not in tests/: " + "; ".join(sorted(set(missing)))


def test_the_check_sees_a_missing_name():
    files, names, pairs = cited("see `tests/serve/test_app.py::test_nothing_like_this` and `test_gone_away`")
    assert files == ["serve/test_app.py"] and "test_gone_away" in names
    assert pairs == [("serve/test_app.py", "test_nothing_like_this")]
    assert "test_nothing_like_this" not in set().union(*defined_tests().values())
    tests = defined_tests()
    real = "model/test_transformer.py::test_decoder_only_is_causal"
    assert real.split("::")[1] in tests["model/test_transformer.py"]
    # without the tests/ prefix, and a file that does not exist: both reported
    assert missing_in(f"`{real}`, `model/test_transformer.py::test_not_there`, `model/test_gone.py::test_x`",
                      tests) == ["model/test_transformer.py::test_not_there", "model/test_gone.py::test_x"]


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_docs_reaches_a_file_and_a_heading():
    broken = []
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([\w./-]+\.md)(?:#([\w-]+))?\)", doc.read_text(encoding="utf-8")):
            path = (doc.parent / target).resolve()
            if not path.is_file():
                broken.append(f"{doc.name}: {target}")
                continue
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            if anchor and anchor not in {slug(h) for h in headings}:
                broken.append(f"{doc.name}: {target}#{anchor}")
    assert not broken, "links to nothing: " + "; ".join(broken)


def test_the_anchor_is_githubs():
    assert slug("Why divide by the square root of d_k") == "why-divide-by-the-square-root-of-d_k"
    assert slug("Sinusoidal, learned or rotary positions (E)") == "sinusoidal-learned-or-rotary-positions-e"
