"""Named datasets and user paths, resolved into train / valid (/ test) splits of text pairs.

SPEC is a built-in name (multi30k, tatoeba-cmn, copy, reverse, numbers) or a path: a TSV file, or a
prefix for PREFIX.SRC and PREFIX.TGT files (plain or .gz).
"""

from __future__ import annotations

import itertools
import os
import random
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiayn.data.corpus import DataError, Parallel, clean, iter_parallel, iter_tsv, read_parallel, read_tsv
from aiayn.data.numbers import number_pairs
from aiayn.io.files import atomic_path, cache_dir, sha256_file

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
}
TEXT_CORPORA = {  # name -> (download address, SHA-256 of the text)
    "tinyshakespeare": ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}
SYNTHETIC = ("copy", "reverse", "numbers")
BUILTIN = ("multi30k", "tatoeba-cmn", *SYNTHETIC)


@dataclass
class Splits:
    """Cleaned text pairs per split; ``test`` may be empty."""

    train: Parallel
    valid: Parallel
    test: Parallel | None = None




def fetch_multi30k(names: list[str], folder: Path, base_url: str | None = None) -> None:
    """Download the Multi30k files ``names`` into ``folder`` (checked against SHA-256; atomic).

    The source is ``base_url``, else $AIAYN_MULTI30K_URL (a mirror), else the public repository.
    """
    base_url = base_url or os.environ.get("AIAYN_MULTI30K_URL", MULTI30K_URL)
    offline = "pass --data-dir DIR, a folder holding train/val/test_2016_flickr .de/.en/.fr .gz files"
    for name in names:
        fetch(f"{base_url}/{name}", folder / name, MULTI30K_SHA256[name], "multi30k", offline)


def fetch(url: str, target: Path, sha256: str | None, corpus: str, offline: str) -> None:
    """Download ``url`` to ``target`` atomically, checked against ``sha256`` when there is one; a good copy
    (any copy, without a checksum) is kept. ``offline`` says what to do on an offline machine."""
    if target.is_file() and (sha256 is None or sha256_file(target) == sha256):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        try:
            urllib.request.urlretrieve(url, tmp)
        except OSError as err:
            raise DataError(f"{corpus}: cannot download {target.name} ({err}); on an offline machine {offline}") \
                from None
        if sha256 is not None and sha256_file(tmp) != sha256:
            raise DataError(f"{corpus}: {target.name} from {url} failed its SHA-256 check; try again later "
                            "or pass --data-dir with a good copy")


def text_corpus(spec: str, data_dir: str | Path | None) -> Path:
    """The file of a language-modelling corpus: a built-in name (tinyshakespeare: downloaded and checked,
    or found in --data-dir as input.txt or input.txt.gz) or a path to a text file (plain or .gz)."""
    if spec not in TEXT_CORPORA:
        return Path(spec)
    url, sha256 = TEXT_CORPORA[spec]
    if data_dir is not None:
        for name in ("input.txt", "input.txt.gz"):
            if (Path(data_dir) / name).is_file():
                return Path(data_dir) / name
        raise DataError(f"{spec}: no input.txt or input.txt.gz in {data_dir}")
    target = cache_dir() / spec / "input.txt"
    fetch(os.environ.get("AIAYN_TINYSHAKESPEARE_URL", url), target, sha256, spec,
          "pass --data-dir DIR, a folder holding input.txt")
    return target


def load_multi30k(src: str, tgt: str, data_dir: str | Path | None) -> Splits:
    for lang in (src, tgt):
        if lang not in ("de", "en", "fr"):
            raise DataError(f"multi30k: language {lang!r} not in the corpus; use de, en or fr")
    if data_dir is None:
        folder = cache_dir() / "multi30k"
        fetch_multi30k([f"{s}.{lang}.gz" for s in MULTI30K_SPLITS.values() for lang in (src, tgt)], folder)
    else:
        folder = Path(data_dir)
    parts = {key: read_parallel(folder / f"{name}.{src}.gz", folder / f"{name}.{tgt}.gz")
             for key, name in MULTI30K_SPLITS.items()}
    return Splits(clean(parts["train"]), clean(parts["valid"]), clean(parts["test"]))


def load_tatoeba(src: str, tgt: str, data_dir: str | Path | None) -> Splits:
    if {src, tgt} != {"en", "zh"}:
        raise DataError("tatoeba-cmn: languages are en and zh; pass --src-lang en --tgt-lang zh or the reverse")
    folder = Path(data_dir) if data_dir is not None else cache_dir() / "tatoeba-cmn"
    if not (folder / "train.en-zh.tsv").is_file():
        raise DataError(f"tatoeba-cmn: {folder / 'train.en-zh.tsv'} not found; pass --data-dir DIR, a folder "
                        "with train.en-zh.tsv and dev.en-zh.tsv (english<TAB>chinese a line)")
    swap = src == "zh"
    return Splits(clean(read_tsv(folder / "train.en-zh.tsv", swap)), clean(read_tsv(folder / "dev.en-zh.tsv", swap)))


def synthetic_pairs(name: str, count: int, seed: int) -> Parallel:
    """copy / reverse: random letter-words copied (or reversed); numbers: digits -> English words."""
    if name == "numbers":
        return Parallel(*number_pairs(count, seed))
    rng = random.Random(seed)
    words = [[rng.choice("abcdefghij") for _ in range(rng.randint(5, 10))] for _ in range(count)]
    out = [w[::-1] if name == "reverse" else w for w in words]
    return Parallel([" ".join(w) for w in words], [" ".join(w) for w in out])


def load_path(spec: str, src: str | None, tgt: str | None, valid: str | None, seed: int) -> Splits:
    """A TSV file, or PREFIX.SRC / PREFIX.TGT (plain or .gz), or a corpus folder (``train.tsv`` with
    ``valid.tsv`` and ``test.tsv`` if there: what ``aiayn distill`` writes); valid split from ``valid``, the
    folder, or held out."""
    folder = Path(spec)
    if folder.is_dir():
        if not (folder / "train.tsv").is_file():
            raise DataError(f"{folder}: a corpus folder needs train.tsv (and valid.tsv, test.tsv if you have them)")
        test = clean(read_tsv(folder / "test.tsv")) if (folder / "test.tsv").is_file() else None
        if valid is None and (folder / "valid.tsv").is_file():
            return Splits(clean(read_tsv(folder / "train.tsv")), clean(read_tsv(folder / "valid.tsv")), test)
        spec = str(folder / "train.tsv")
    train = _read_spec(spec, src, tgt)
    if valid is not None:
        return Splits(train, _read_spec(valid, src, tgt))
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    n_valid = min(1000, max(1, len(order) // 100))
    held, kept = sorted(order[:n_valid]), sorted(order[n_valid:])
    pick = lambda p, idx: Parallel([p.sources[i] for i in idx], [p.targets[i] for i in idx], p.dropped)  # noqa: E731
    return Splits(pick(train, kept), pick(train, held))


def _read_spec(spec: str, src: str | None, tgt: str | None) -> Parallel:
    path = Path(spec)
    if path.is_file():
        return clean(read_tsv(path))
    if src is None or tgt is None:
        raise DataError(f"{spec}: no such file; for PREFIX.SRC / PREFIX.TGT files pass --src-lang and --tgt-lang")
    for suffix in ("", ".gz"):
        s, t = Path(f"{spec}.{src}{suffix}"), Path(f"{spec}.{tgt}{suffix}")
        if s.is_file() and t.is_file():
            return clean(read_parallel(s, t))
    raise DataError(f"{spec}: neither a TSV file nor a prefix of {spec}.{src} and {spec}.{tgt} (plain or .gz)")


def load_splits(spec: str, src: str | None = None, tgt: str | None = None, data_dir: str | Path | None = None,
                valid: str | None = None, seed: int = 0, synthetic_size: int = 20000) -> Splits:
    """Resolve a data SPEC into splits of cleaned text pairs."""
    if spec == "multi30k":
        return load_multi30k(src or "de", tgt or "en", data_dir)
    if spec == "tatoeba-cmn":
        return load_tatoeba(src or "en", tgt or "zh", data_dir)
    if spec in SYNTHETIC:
        return Splits(synthetic_pairs(spec, synthetic_size, seed), synthetic_pairs(spec, 500, seed + 1),
                      synthetic_pairs(spec, 1000, seed + 2))
    return load_path(spec, src, tgt, valid, seed)


def stream_splits(spec: str, src: str | None = None, tgt: str | None = None, data_dir: str | Path | None = None,
                  valid: str | None = None, seed: int = 0, synthetic_size: int = 20000,
                  hold_every: int = 100, hold_max: int = 1000) -> tuple[Iterator[tuple[str, str]], Parallel]:
    """The training pairs of a data SPEC one at a time (uncleaned), and the cleaned validation pairs.

    For corpora of any size (``aiayn preprocess``): a path is read as it streams. Its validation pairs come
    from ``valid``, the folder's ``valid.tsv``, or else every ``hold_every``-th pair (up to ``hold_max``),
    which then stays out of training. Built-in names are small and load whole (:func:`load_splits`).
    """
    path = Path(spec)
    if spec in BUILTIN and not path.exists():
        splits = load_splits(spec, src, tgt, data_dir, valid, seed, synthetic_size)
        return zip(splits.train.sources, splits.train.targets, strict=True), splits.valid
    if path.is_dir():
        if not (path / "train.tsv").is_file():
            raise DataError(f"{path}: a corpus folder needs train.tsv (and valid.tsv if you have one)")
        if valid is None and (path / "valid.tsv").is_file():
            valid = str(path / "valid.tsv")
        path = path / "train.tsv"
    pairs = iter_tsv(path) if path.is_file() else _stream_prefix(str(path), src, tgt)
    if valid is not None:
        return pairs, _read_spec(valid, src, tgt)
    held: list[tuple[str, str]] = []

    def train_pairs() -> Iterator[tuple[str, str]]:
        for number, pair in enumerate(pairs):
            if number % hold_every == 0 and len(held) < hold_max:
                held.append(pair)
            else:
                yield pair
    stream = train_pairs()
    first = list(itertools.islice(stream, hold_every * hold_max))  # reading this far fills the held-out set
    return itertools.chain(first, stream), clean(Parallel([s for s, _ in held], [t for _, t in held]))


def _stream_prefix(spec: str, src: str | None, tgt: str | None) -> Iterator[tuple[str, str]]:
    if src is None or tgt is None:
        raise DataError(f"{spec}: no such file; for PREFIX.SRC / PREFIX.TGT files pass --src-lang and --tgt-lang")
    for suffix in ("", ".gz"):
        s, t = Path(f"{spec}.{src}{suffix}"), Path(f"{spec}.{tgt}{suffix}")
        if s.is_file() and t.is_file():
            return iter_parallel(s, t)
    raise DataError(f"{spec}: neither a TSV file nor a prefix of {spec}.{src} and {spec}.{tgt} (plain or .gz)")
