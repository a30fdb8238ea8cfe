"""The docs as a site: ``mkdocs build --strict`` (mkdocs.yml) succeeds, so a broken link, a missing anchor or a page
left out of the navigation fails the suite; the API reference holds the public names' docstrings."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("ModelConfig", "EncoderDecoder", "DecoderOnly", "EncoderOnly", "DecodingConfig", "Translator",
                 "TextGenerator", "Embedder", "Trainer", "TrainConfig", "import_pretrained", "export_hf"):
        assert re.search(rf'id="aiayn\.(\w+\.)*{name}"', api), name  # its own entry, not a mention
    assert "One decoding config" in (site / "decoding" / "index.html").read_text(encoding="utf-8")
    assert (site / "tour.zh" / "index.html").is_file() and (site / "img" / "positions.png").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the tour](tour.md#no-such-heading).\n")
    (docs / "tour.md").write_text("# Tour\n\n## A heading\n")
    (tmp_path / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text().split("\nnav:")[0].replace(
        "paths: [src]", f"paths: [{ROOT / 'src'}]"))
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "no-such-heading" in result.stderr, result.stderr[-2000:]
