"""Who may import whom (docs/architecture.md), and a command line that starts without torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from import_graph import graph  # noqa: E402

GRAPH = graph(ROOT / "src" / "aiayn")
INFERENCE = ("aiayn.attention", "aiayn.cache", "aiayn.checkpoint", "aiayn.config", "aiayn.decoding",
             "aiayn.embeddings", "aiayn.layers", "aiayn.masks", "aiayn.models", "aiayn.packing", "aiayn.positions",
             "aiayn.quantization", "aiayn.translate", "aiayn.serve", "aiayn.visual", "aiayn.tokenizer",
             "aiayn.tokenizer_marian", "aiayn.tokenizer_hf", "aiayn.interop")


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_inference_code_never_imports_training_code():
    bad = [(mod, dep) for mod, deps in GRAPH.items() if _under(mod, INFERENCE)
           for dep in deps if _under(dep, ("aiayn.training",))]
    assert not bad, bad


def test_the_model_layer_imports_no_decoding_or_application_code():
    model_layer = ("aiayn.attention", "aiayn.cache", "aiayn.embeddings", "aiayn.layers", "aiayn.masks",
                   "aiayn.models", "aiayn.positions", "aiayn.init", "aiayn.config", "aiayn.checkpoint")
    above = ("aiayn.decoding", "aiayn.translate", "aiayn.serve", "aiayn.training", "aiayn.data", "aiayn.cli")
    bad = [(mod, dep) for mod, deps in GRAPH.items() if _under(mod, model_layer) for dep in deps
           if _under(dep, above)]
    assert not bad, bad


def test_help_imports_no_torch():
    code = "import sys; from aiayn.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "main_help = 'torch' in sys.modules\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n" \
           "print(main_help, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stdout + out.stderr
