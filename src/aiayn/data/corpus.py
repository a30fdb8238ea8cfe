"""Reading parallel text: TSV files and aligned file pairs (plain or .gz), with clear errors."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and what to do."""


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (plain or .gz), without line endings or a leading BOM."""
    return list(iter_lines(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain or .gz) one at a time, as :func:`read_lines` gives them."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with _open_bytes(path) as f:
            yield from iter_decoded(f, str(path))
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read ({err})") from None


def decode_lines(stream: Iterable[bytes], name: str) -> list[str]:
    """UTF-8 lines of a binary stream (a file, stdin), without line endings or a leading BOM; an invalid
    byte is a DataError naming ``name`` and the line."""
    return list(iter_decoded(stream, name))


def iter_decoded(stream: Iterable[bytes], name: str) -> Iterator[str]:
    """:func:`decode_lines`, one line at a time."""
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{name}:{number}: invalid UTF-8 at byte {err.start} of the line; "
                            "convert the text to UTF-8") from None
        yield text.rstrip("\r\n").removeprefix("\ufeff") if number == 1 else text.rstrip("\r\n")


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


def target_tag(lang: str) -> str:
    """The token that asks a model trained on both directions for ``lang``: ``<2de>`` (Johnson et al., 2017)."""
    return f"<2{lang}>"


def with_prefix(prefix: str, text: str) -> str:
    """``text`` led by ``prefix`` and one space (a prefix ending in one, as T5's task prefixes, keeps only its
    own); an empty prefix or a blank text is left as it is."""
    return f"{prefix.removesuffix(' ')} {text}" if prefix and text.strip() else text


def tagged(pairs: Parallel, tgt_lang: str) -> Parallel:
    """The pairs with every source led by the tag of ``tgt_lang``."""
    return Parallel([with_prefix(target_tag(tgt_lang), s) for s in pairs.sources], pairs.targets, dict(pairs.dropped))


def both_directions(pairs: Parallel, src_lang: str, tgt_lang: str) -> Parallel:
    """The pairs each way, every source led by its target's tag: (<2tgt> s, t) for all, then (<2src> t, s)."""
    forward, backward = tagged(pairs, tgt_lang), tagged(pairs.swap(), src_lang)
    return Parallel(forward.sources + backward.sources, forward.targets + backward.targets, dict(pairs.dropped))


def read_tsv(path: str | Path, swap: bool = False) -> Parallel:
    """``source<TAB>target`` a line (``swap`` reads ``target<TAB>source``)."""
    sources, targets = [], []
    for source, target in iter_tsv(path):
        sources.append(source)
        targets.append(target)
    pair = Parallel(sources, targets)
    return pair.swap() if swap else pair


def iter_tsv(path: str | Path) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of a TSV file one at a time; blank lines are skipped."""
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(f"{path}:{number}: expected 'source<TAB>target', found {len(parts)} field(s)")
        yield parts[0], parts[1]


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Parallel:
    """Two aligned files, line i of one translating line i of the other."""
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise DataError(f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}; "
                        "aligned files need the same number of lines")
    return Parallel(sources, targets)


def iter_parallel(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    """:func:`read_parallel`, one pair at a time (files of any size)."""
    for source, target in itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path)):
        if source is None or target is None:
            raise DataError(f"{src_path} and {tgt_path} have different numbers of lines; aligned files need "
                            "the same number of lines")
        yield source, target


def clean_pair(source: str, target: str) -> tuple[str, str] | None:
    """Whitespace collapsed on both sides; None when either side is empty."""
    source, target = " ".join(source.split()), " ".join(target.split())
    return (source, target) if source and target else None


def clean(pairs: Parallel) -> Parallel:
    """Strip whitespace; skip pairs where either side is empty (counted in ``dropped['empty']``)."""
    sources, targets, empty = [], [], 0
    for pair in (clean_pair(s, t) for s, t in zip(pairs.sources, pairs.targets, strict=True)):
        if pair is None:
            empty += 1
        else:
            sources.append(pair[0])
            targets.append(pair[1])
    return Parallel(sources, targets, {**pairs.dropped, "empty": empty})
