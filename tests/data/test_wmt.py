"""WMT14 en-de preparation against a small local mirror with statmt.org's layout (nothing is downloaded)."""

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from aiayn.data.corpus import DataError, read_lines
from aiayn.data.wmt import ARCHIVES, PARTS, prepare_wmt14

SGM = '<srcset setid="newstest2014" srclang="any">\n<doc docid="1" origlang="en">\n{segs}</doc>\n</srcset>\n'


def _member_text(member: str, lang: str, n: int) -> str:
    lines = [f"{Path(member).name} {lang} {i}" for i in range(n)]
    if member.endswith(".sgm"):
        return SGM.format(segs="".join(f'<seg id="{i + 1}">  {line} </seg>\n' for i, line in enumerate(lines)))
    return "".join(line + "\n" for line in lines)


def _mirror(root: Path, n: int = 3) -> tuple[str, dict]:
    """Tiny archives with the real member names, n lines each; returns the base URL and the counts."""
    counts = {}
    for archive, address in ARCHIVES.items():
        (root / address).parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(root / address, "w:gz") as tar:
            for parts in PARTS.values():
                for name, member, _ in parts:
                    if name != archive:
                        continue
                    counts[member] = n
                    for lang, side in (("en", "src"), ("de", "ref")):
                        name = member.format(lang=lang, side=side)
                        data = _member_text(name, lang, n).encode()
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
    return root.as_uri(), counts


def test_prepare_writes_aligned_checked_splits(tmp_path):
    url, counts = _mirror(tmp_path / "mirror")
    record = prepare_wmt14(tmp_path / "wmt", url, counts)
    train_en = read_lines(tmp_path / "wmt" / "train.en")
    assert len(train_en) == 9 and train_en[0] == "europarl-v7.de-en.en en 0" and train_en[-1].startswith("news-")
    assert read_lines(tmp_path / "wmt" / "train.de")[3] == "commoncrawl.de-en.de de 0"
    assert read_lines(tmp_path / "wmt" / "test.en") == [f"newstest2014-deen-src.en.sgm en {i}" for i in range(3)]
    assert read_lines(tmp_path / "wmt" / "test.de")[0] == "newstest2014-deen-ref.de.sgm de 0"
    assert record["lines"]["valid"] == {"dev/newstest2013.{lang}": 3}
    # the archives are kept: a rerun without the mirror works
    again = prepare_wmt14(tmp_path / "wmt", (tmp_path / "gone").as_uri(), counts)
    assert again["lines"] == record["lines"] and read_lines(tmp_path / "wmt" / "train.en") == train_en


def test_a_wrong_line_count_names_the_member_and_what_to_do(tmp_path):
    url, counts = _mirror(tmp_path / "mirror")
    with pytest.raises(DataError, match=r"dev\.tgz: dev/newstest2013\.en has 3 lines, expected 3000; delete"):
        prepare_wmt14(tmp_path / "wmt", url, {k: v for k, v in counts.items() if "newstest2013" not in k})
    assert not (tmp_path / "wmt" / "valid.en").exists(), "no half-written split"


def test_offline_and_damaged_archives_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match=r"cannot download .* copy the archives"):
        prepare_wmt14(tmp_path / "wmt", (tmp_path / "nothing").as_uri())
    url, counts = _mirror(tmp_path / "mirror")
    prepare_wmt14(tmp_path / "wmt", url, counts)
    (tmp_path / "wmt" / "downloads" / "training-parallel-europarl-v7.tgz").write_bytes(b"not a tarball")
    result = subprocess.run([sys.executable, "-m", "aiayn", "data", "wmt14-en-de", "--output", str(tmp_path / "wmt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "europarl-v7.tgz: damaged archive" in result.stderr
