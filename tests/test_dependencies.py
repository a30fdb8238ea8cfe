"""A plain ``pip install aiayn`` runs every checkpoint aiayn writes: each package the library imports is a base
dependency, except the few named optional here, which are imported only where they are needed and whose
absence is a one-line error naming the package to install."""

import ast
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = {  # exporting to Hugging Face / CTranslate2; the paper's tokenized BLEU: (where imported, the hint)
    "transformers": ({"interop/hf_export.py", "formats/gpt2.py", "formats/llama.py", "formats/gemma.py",
                      "formats/phi3.py"},
                     "pip install transformers"),
    "ctranslate2": ({"interop/ctranslate2.py"}, "pip install ctranslate2"),
    "sacremoses": ({"evaluation.py"}, "pip install 'aiayn[wmt]'"),
    "mcp": ({"cli/mcp.py", "serve/mcp_tools.py"}, "pip install 'aiayn[mcp]'"),  # --mcp's tool servers
    "httpx2": ({"serve/mcp_tools.py"}, "pip install 'aiayn[mcp]'"),  # (the SDK's HTTP client, for a url entry)
}
# import name -> package name, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "prometheus_client": "prometheus-client"}


def _imported() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "src" / "aiayn").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "aiayn":
                    found.setdefault(top, set()).add(path.relative_to(ROOT / "src" / "aiayn").as_posix())
    return found


def test_every_import_is_a_base_dependency_or_a_named_optional_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {dep.split(">")[0].split("=")[0].split("<")[0].strip().lower() for dep in project["dependencies"]}
    imported = _imported()
    assert "tokenizers" in imported and "tokenizers" in base  # imported GPT-2 and BERT checkpoints need it
    missing = {name: sorted(where) for name, where in imported.items()
               if DISTRIBUTION.get(name, name) not in base and name not in OPTIONAL}
    assert not missing, missing
    sources = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "aiayn").rglob("*.py"))
    for name, (where, hint) in OPTIONAL.items():
        assert imported[name] == where, (name, imported[name])  # optional ones stay in their places (export)
        assert hint in sources  # and their absence says what to install
