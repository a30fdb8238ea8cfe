"""Print the import graph of ``src/aiayn``: one line per module, the aiayn modules it imports.

Reads the source with ``ast`` (nothing is imported or run), so it works on any checkout:

    python scripts/import_graph.py [--root src/aiayn] [--dot]

Imports inside functions count too (they are marked ``(lazy)``). ``--dot`` prints Graphviz instead.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> dict[str, bool]:
    """aiayn modules imported by ``path`` -> True when only imported inside a function (lazily)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith(package)]
        else:
            continue
        for name in names:
            lazy = id(node) not in top and not _in_type_checking(tree, node)
            found[name] = found.get(name, True) and lazy
    return found


def _in_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    return any(isinstance(n, ast.If) and node in ast.walk(n) and "TYPE_CHECKING" in ast.unparse(n.test)
               for n in tree.body)


def graph(root: Path) -> dict[str, dict[str, bool]]:
    return {module_name(root, p): imports_of(p, root.name) for p in sorted(root.rglob("*.py"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "src" / "aiayn"))
    parser.add_argument("--dot", action="store_true", help="print Graphviz dot")
    args = parser.parse_args()
    edges = graph(Path(args.root))
    if args.dot:
        print("digraph aiayn {")
        for mod, deps in edges.items():
            for dep, lazy in sorted(deps.items()):
                print(f'  "{mod}" -> "{dep}"{" [style=dashed]" if lazy else ""};')
        print("}")
        return
    for mod, deps in edges.items():
        listed = ", ".join(f"{d}{' (lazy)' if lazy else ''}" for d, lazy in sorted(deps.items()))
        print(f"{mod}: {listed or '-'}")


if __name__ == "__main__":
    main()
