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


def test_every_test_file_and_test_the_docs_name_exists():
    tests = defined_tests()
    everywhere = set().union(*tests.values())
    missing = []
    for doc in DOCS:
        files, names, pairs = cited(doc.read_text(encoding="utf-8"))
        missing += [f"{doc.name}: tests/{f}" for f in files if f not in tests]
        missing += [f"{doc.name}: {n}" for n in names if n not in everywhere]
        for file, name in pairs:
            owners = [f for f in tests if f == file or f.endswith("/" + file)]
            if owners and not any(name in tests[f] for f in owners):
                missing.append(f"{doc.name}: {file}::{name}")
    assert not missing, "named in the docs but not in tests/: " + "; ".join(sorted(set(missing)))


def test_the_check_sees_a_missing_name():
    files, names, pairs = cited("see `tests/serve/test_app.py::test_nothing_like_this` and `test_gone_away`")
    assert files == ["serve/test_app.py"] and "test_gone_away" in names
    assert pairs == [("serve/test_app.py", "test_nothing_like_this")]
    assert "test_nothing_like_this" not in set().union(*defined_tests().values())


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
