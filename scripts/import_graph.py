"""Print the import graph of ``src/aiayn``: one line per module, the aiayn modules it imports, then its cycles
and its upward arrows (an import of a higher layer, ``LAYERS``).

Reads the source with ``ast`` (nothing is imported or run), so it works on any checkout:

    python scripts/import_graph.py [--root src/aiayn] [--dot]

Imports inside functions count too (they are marked ``(lazy)``). ``--dot`` prints Graphviz instead.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

# The packages, lowest first: a module may import its own package and any lower layer, never one beside or above.
LAYERS = (
    ("aiayn",),  # the public API: names resolved on use (importlib), no static import
    ("aiayn.io",),  # files, checkpoint folders
    ("aiayn.kernels",),  # aiayn's own CPU kernels, built on the machine that runs them
    ("aiayn.model",),  # the paper's parts and the family built from them
    ("aiayn.tokenizers",),
    ("aiayn.data", "aiayn.decoding"),
    ("aiayn.formats",),  # other tools' files read in (a Hugging Face folder, a GGUF file): what loading for use reads
    ("aiayn.inference", "aiayn.evaluation"),  # using a checkpoint; scoring
    ("aiayn.visual",),
    ("aiayn.interop",),  # pretrained models in and out, adapters in PEFT's format
    ("aiayn.training",),  # fine-tuning starts from an imported model and saves PEFT adapters
    ("aiayn.serve",),
    ("aiayn.cli",),
    ("aiayn.__main__",),
)


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str, modules: set[str]) -> dict[str, bool]:
    """aiayn modules imported by ``path`` -> True when only imported inside a function (lazily).
    ``from aiayn.x import y`` counts as an import of ``aiayn.x.y`` when that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
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
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(root, p) for p in paths}
    return {module_name(root, p): imports_of(p, root.name, modules) for p in paths}


def package_of(module: str) -> str:
    """The layer entry a module belongs to: the longest prefix listed in ``LAYERS``."""
    names = [n for layer in LAYERS for n in layer if module == n or module.startswith(n + ".")]
    if not names:
        raise ValueError(f"{module}: in no layer; add its package to LAYERS")
    return max(names, key=len)


def rank(module: str) -> int:
    name = package_of(module)
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def upward(edges: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    """Imports of a package beside or above the importer's (within one package any import is fine)."""
    return [(mod, dep) for mod, deps in edges.items() for dep in deps
            if package_of(mod) != package_of(dep) and rank(dep) >= rank(mod)]


def cycles(edges: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (or a module importing itself), lazy imports too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in edges.get(v, {}):
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


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
    found, up = cycles(edges), upward(edges)
    top = [m for m in edges if m.count(".") == 1 and not (Path(args.root) / m.split(".")[1]).is_dir()]
    print(f"\n{len(edges)} modules, {len(top)} at the top level; {len(found)} cycles; {len(up)} upward arrows")
    for group in found:
        print("cycle: " + " <-> ".join(group))
    for mod, dep in up:
        print(f"upward: {mod} -> {dep}")


if __name__ == "__main__":
    main()
