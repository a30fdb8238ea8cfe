"""Who may import whom: rules over packages (scripts/import_graph.py's LAYERS), and a command line that starts
without torch."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from import_graph import LAYERS, cycles, graph, package_of, upward  # noqa: E402

GRAPH = graph(ROOT / "src" / "aiayn")


def _imports(importer: str, imported: tuple[str, ...]) -> list[tuple[str, str]]:
    """Edges from modules of package ``importer`` to modules of any package in ``imported``."""
    return [(mod, dep) for mod, deps in GRAPH.items() if package_of(mod) == importer
            for dep in deps if package_of(dep) in imported]


def test_every_module_is_in_a_layer():
    for module in GRAPH:
        package_of(module)  # raises for a module no layer names


def test_no_cycles_lazy_imports_included():
    assert cycles(GRAPH) == []


def test_no_upward_arrows():
    assert upward(GRAPH) == []


def test_the_model_imports_nothing_above_it():
    above = tuple(name for layer in LAYERS[LAYERS.index(("aiayn.model",)) + 1:] for name in layer)
    assert _imports("aiayn.model", above) == []


def test_inference_never_imports_training_serve_or_cli():
    assert _imports("aiayn.inference", ("aiayn.training", "aiayn.serve", "aiayn.cli")) == []
    assert _imports("aiayn.decoding", ("aiayn.training", "aiayn.serve", "aiayn.cli")) == []


def test_the_library_never_imports_the_command_line():
    library = [p for layer in LAYERS for p in layer if p not in ("aiayn.cli", "aiayn.__main__")]
    assert [edge for p in library for edge in _imports(p, ("aiayn.cli",))] == []


def test_the_rules_see_a_bad_edge():
    """The checks are not vacuous: an upward edge and a cycle added to a copy of the graph are found."""
    bad = {**GRAPH, "aiayn.model.attention": {**GRAPH["aiayn.model.attention"], "aiayn.serve.http": False}}
    assert ("aiayn.model.attention", "aiayn.serve.http") in upward(bad)
    bad["aiayn.serve.http"] = {**bad["aiayn.serve.http"], "aiayn.model.attention": True}
    assert any({"aiayn.model.attention", "aiayn.serve.http"} <= set(group) for group in cycles(bad))


def test_few_modules_at_the_top_level():
    top = [p for p in (ROOT / "src" / "aiayn").glob("*.py")]
    assert len(top) <= 8, sorted(p.name for p in top)


def test_help_imports_no_torch():
    code = "import sys; from aiayn.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "main_help = 'torch' in sys.modules\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n" \
           "print(main_help, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stdout + out.stderr


def test_every_public_name_still_imports_from_the_top():
    import aiayn

    before = ["DecoderOnly", "EncoderDecoder", "EncoderOnly", "ModelConfig", "TransformerModel", "build_model",
              "count_parameters", "generate", "pack", "quantize"]  # aiayn's names before the re-housing
    assert set(before) <= set(aiayn.__all__)
    for name in aiayn.__all__:
        assert callable(getattr(aiayn, name)), name


SERVER_ROUTES = ("translate", "generate", "openai", "openai_text", "encode", "inspect", "tokens")
ENGINE_ROOM = ("scheduler", "admission", "jobs", "mirror", "limits", "threads")


def _serve_edges(graph: dict) -> list[tuple[str, str]]:
    """Edges inside aiayn.serve that break its rooms: anything importing the front door (serve/server.py), a
    route module importing another kind's, the engine room importing a route or the HTTP helpers."""
    bad = []
    for mod, deps in graph.items():
        if not mod.startswith("aiayn.serve."):
            continue
        name = mod.rsplit(".", 1)[1]
        for dep in deps:
            dep_name = dep.rsplit(".", 1)[1] if dep.startswith("aiayn.serve.") else None
            if dep_name == "server" or (name in ENGINE_ROOM and dep_name in (*SERVER_ROUTES, "http", "server")) or (
                    name in ("translate", "generate", "encode") and dep_name in ("translate", "generate", "encode")):
                bad.append((mod, dep))
    return bad


def test_the_server_rooms_one_front_door_over_routes_over_the_engine_room():
    assert _serve_edges(GRAPH) == []
    bad = {**GRAPH, "aiayn.serve.scheduler": {**GRAPH["aiayn.serve.scheduler"], "aiayn.serve.generate": False},
           "aiayn.serve.translate": {**GRAPH["aiayn.serve.translate"], "aiayn.serve.server": True}}
    assert set(_serve_edges(bad)) == {("aiayn.serve.scheduler", "aiayn.serve.generate"),
                                      ("aiayn.serve.translate", "aiayn.serve.server")}


NUMBERS = {10: "Ten", 11: "Eleven", 12: "Twelve", 13: "Thirteen", 14: "Fourteen", 15: "Fifteen", 16: "Sixteen"}


def _drawn_layers() -> list[tuple[str, str]]:
    """docs/architecture.md's drawing of the layers, lowest first: (the packages' column, their modules' text)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The layers of the house", 1)[1]
    drawing = section.split("```", 2)[1].splitlines()[1:]
    rows: list[list[str]] = []
    for line in drawing:
        if line[1:2] not in (" ", "|"):  # a new entry: its packages from column 1
            rows.append([line[1:30].strip(), line[30:]])
        else:
            rows[-1][1] += " " + line[30:]
    return [tuple(row) for row in reversed(rows)]


def _packages(column: str) -> tuple[str, ...]:
    """``"data/       decoding/"`` -> ("aiayn.data", "aiayn.decoding"); ``aiayn (__init__)`` -> ("aiayn",)."""
    if column.startswith("aiayn "):
        return ("aiayn",)
    return tuple(f"aiayn.{word.rstrip('/')}" for word in column.split())


def test_the_architecture_doc_draws_the_layers_as_they_are():
    """The doc's drawing cannot drift: its rows are LAYERS in order, each names every module of its packages, and
    its sentence counts them."""
    drawn = _drawn_layers()
    assert [_packages(column) for column, _ in drawn] == list(LAYERS)
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"{NUMBERS[len(LAYERS)]} layers, lowest first" in text
    root = ROOT / "src" / "aiayn"
    for (_, modules), packages in zip(drawn, LAYERS, strict=True):
        words = set(re.findall(r"\w+", modules))
        for package in packages:
            folder = root.joinpath(*package.split(".")[1:])
            if package != "aiayn":  # the top level's other modules are layers of their own
                missing = [p.stem for p in folder.glob("*.py") if p.stem != "__init__" and p.stem not in words]
                assert missing == [], f"docs/architecture.md: {package} does not name {missing}"


LONG_FUNCTIONS = {"cli/decode.py::_add_family"}  # argparse flags declared one after another, read as a list


def test_a_reading_budget_no_file_over_300_lines_no_function_over_40():
    """nanoGPT's reading budget, kept: every source file at most 300 lines, every function's body (after its
    docstring) at most 40, but for the listed ones a reader follows as a list."""
    import ast

    root = ROOT / "src" / "aiayn"
    long_files, long_functions = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 300:
            long_files.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.body[0]
                documented = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
                start = first.end_lineno + 1 if documented and len(node.body) > 1 else first.lineno
                name = f"{path.relative_to(root)}::{node.name}"
                if node.end_lineno - start + 1 > 40 and name not in LONG_FUNCTIONS:
                    long_functions.append(name)
    assert long_files == [] and long_functions == []
