"""Reading parallel text: TSV files and aligned file pairs (plain or .gz), with clear errors."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and what to do."""


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (plain or .gz), without line endings or a leading BOM."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with _open_bytes(path) as f:
            return decode_lines(f, str(path))
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read ({err})") from None


def decode_lines(stream: Iterable[bytes], name: str) -> list[str]:
    """UTF-8 lines of a binary stream (a file, stdin), without line endings or a leading BOM; an invalid
    byte is a DataError naming ``name`` and the line."""
    lines = []
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{name}:{number}: invalid UTF-8 at byte {err.start} of the line; "
                            "convert the text to UTF-8") from None
        lines.append(text.rstrip("\r\n"))
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return lines


@dataclass
class Parallel:
    """Aligned source/target sentences, and what cleaning dropped."""

    sources: list[str]
    targets: list[str]
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sources)

    def swap(self) -> Parallel:
        return Parallel(self.targets, self.sources, dict(self.dropped))


def read_tsv(path: str | Path, swap: bool = False) -> Parallel:
    """``source<TAB>target`` a line (``swap`` reads ``target<TAB>source``)."""
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(f"{path}:{number}: expected 'source<TAB>target', found {len(parts)} field(s)")
        sources.append(parts[0])
        targets.append(parts[1])
    pair = Parallel(sources, targets)
    return pair.swap() if swap else pair


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Parallel:
    """Two aligned files, line i of one translating line i of the other."""
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise DataError(f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}; "
                        "aligned files need the same number of lines")
    return Parallel(sources, targets)


def clean(pairs: Parallel) -> Parallel:
    """Strip whitespace; skip pairs where either side is empty (counted in ``dropped['empty']``)."""
    sources, targets, empty = [], [], 0
    for s, t in zip(pairs.sources, pairs.targets, strict=True):
        s, t = " ".join(s.split()), " ".join(t.split())
        if s and t:
            sources.append(s)
            targets.append(t)
        else:
            empty += 1
    return Parallel(sources, targets, {**pairs.dropped, "empty": empty})
