"""WMT14 English-German, the paper's corpus (section 5.1): download from statmt.org, extract, check, and write
plain aligned files that ``aiayn tokenizer train``, ``aiayn preprocess`` and ``aiayn evaluate`` read.

The output folder holds ``train.en`` / ``train.de`` (Europarl v7, Common Crawl and News Commentary v9, in
that order: about 4.5M pairs), ``valid.en`` / ``valid.de`` (newstest2013) and ``test.en`` / ``test.de``
(newstest2014, the full 3,003 sentences, the set the paper and sacreBLEU's ``wmt14`` score). Every file is
checked by its line count; a download that stops part-way is fetched again. statmt.org publishes no
checksums for these archives, so the check is the line counts (and that the two sides align).
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

from aiayn.data.corpus import DataError
from aiayn.data.datasets import fetch
from aiayn.io.files import atomic_path, atomic_write_text, output_folder

STATMT = "https://www.statmt.org"
ARCHIVES = {  # archive -> its address under STATMT
    "training-parallel-europarl-v7.tgz": "wmt13/training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz": "wmt13/training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz": "wmt14/training-parallel-nc-v9.tgz",
    "dev.tgz": "wmt14/dev.tgz",
    "test-full.tgz": "wmt14/test-full.tgz",
}
# split -> parts: (archive, member with {lang}, lines); .sgm members are SGML (one <seg> per sentence)
PARTS = {
    "train": [("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en.{lang}", 1_920_209),
              ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en.{lang}", 2_399_123),
              ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en.{lang}", 201_288)],
    "valid": [("dev.tgz", "dev/newstest2013.{lang}", 3_000)],
    "test": [("test-full.tgz", "test-full/newstest2014-deen-{side}.{lang}.sgm", 3_003)],
}
SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def download(name: str, folder: Path, base_url: str) -> Path:
    """``folder/name`` from ``base_url``, kept when already there (atomic: never a half file)."""
    fetch(f"{base_url.rstrip('/')}/{ARCHIVES[name]}", folder / name, None, "wmt14",
          f"copy the archives ({', '.join(ARCHIVES)}) into {folder}")
    return folder / name


def _member_lines(archive: Path, member: str) -> Iterator[str]:
    """The text lines of one archive member, streamed (SGML segments for .sgm), without line ends."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            handle = tar.extractfile(member)
            if handle is None:
                raise KeyError(member)
            for raw in handle:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not member.endswith(".sgm"):
                    yield line
                elif m := SEG.search(line):
                    yield m.group(1).strip()
    except KeyError:
        raise DataError(f"{archive}: no {member} inside; delete the archive to download it again") from None
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as err:
        raise DataError(f"{archive}: damaged archive ({err}); delete it to download it again") from None


def _write_split(folder: Path, downloads: Path, split: str, counts: dict | None) -> dict:
    """``split.en`` and ``split.de``, streamed from their archive members and checked part by part."""
    found = {}
    for lang in ("en", "de"):
        side = "src" if lang == "en" else "ref"  # newstest2014: the English source, the German reference
        with atomic_path(folder / f"{split}.{lang}") as tmp, tmp.open("w", encoding="utf-8") as out:
            for archive, member, lines in PARTS[split]:
                expected, name, got = (counts or {}).get(member, lines), member.format(lang=lang, side=side), 0
                for line in _member_lines(downloads / archive, name):
                    out.write(line + "\n")
                    got += 1
                if got != expected:
                    raise DataError(f"{downloads / archive}: {name} has {got} lines, expected {expected}; delete "
                                    "the archive to download it again")
                found[member] = expected
    return found


def prepare_wmt14(output: str | Path, base_url: str | None = None, counts: dict | None = None,
                  overwrite: bool = False) -> dict:
    """Download (or reuse) the five archives into ``output/downloads`` and write the split files.

    ``base_url`` (else $AIAYN_WMT14_URL, else statmt.org) may be a mirror with the same layout; ``counts``
    replaces the expected line counts (member -> lines; tests use small archives). Returns what
    ``wmt14.json`` records.
    """
    folder = output_folder(output, "data", overwrite, own_files=("wmt14.json", "downloads"))
    downloads = folder / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    base_url = base_url or os.environ.get("AIAYN_WMT14_URL", STATMT)
    for name in ARCHIVES:
        download(name, downloads, base_url)
    record = {"corpus": "wmt14-en-de", "source": base_url,
              "lines": {split: _write_split(folder, downloads, split, counts) for split in PARTS}}
    atomic_write_text(folder / "wmt14.json", json.dumps(record, indent=1) + "\n")
    return record
