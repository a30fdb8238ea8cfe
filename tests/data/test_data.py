"""Readers, cleaning, batching and the built-in datasets, with their errors."""

import gzip
from pathlib import Path

import pytest
import torch

from aiayn.data.batching import lm_blocks, token_batches
from aiayn.data.corpus import DataError, clean, read_lines, read_parallel, read_tsv
from aiayn.data.datasets import MULTI30K_SHA256, fetch_multi30k, load_splits
from aiayn.data.numbers import number_to_words

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_tsv_and_gz_pairs(tmp_path):
    (tmp_path / "a.tsv").write_text("\ufeffhallo\thello\n\nwelt\tworld\n", encoding="utf-8")
    pairs = read_tsv(tmp_path / "a.tsv")
    assert pairs.sources == ["hallo", "welt"] and pairs.targets == ["hello", "world"]
    with gzip.open(tmp_path / "x.de.gz", "wt") as f:
        f.write("eins\nzwei\n")
    (tmp_path / "x.en").write_text("one\ntwo\n")
    assert read_parallel(tmp_path / "x.de.gz", tmp_path / "x.en").targets == ["one", "two"]


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    (tmp_path / "a.de").write_text("1\n2\n3\n")
    (tmp_path / "a.en").write_text("1\n2\n")
    with pytest.raises(DataError, match=r"a\.de has 3 lines but .*a\.en has 2"):
        read_parallel(tmp_path / "a.de", tmp_path / "a.en")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    with pytest.raises(DataError, match=r"bad\.txt:3: invalid UTF-8"):
        read_lines(tmp_path / "bad.txt")


def test_tsv_without_tab_names_the_line(tmp_path):
    (tmp_path / "a.tsv").write_text("a\tb\nno tab here\n")
    with pytest.raises(DataError, match=r"a\.tsv:2"):
        read_tsv(tmp_path / "a.tsv")


def test_clean_skips_and_counts_empty_pairs(tmp_path):
    (tmp_path / "a.tsv").write_text("a  b\tc\n \td\ne\t\nf\tg\n")
    cleaned = clean(read_tsv(tmp_path / "a.tsv"))
    assert cleaned.sources == ["a b", "f"] and cleaned.dropped == {"empty": 2}


def test_token_batches_respect_budget_cover_everything_and_are_seeded():
    src = [3, 10, 7, 7, 2, 30, 12, 5, 9, 1] * 20
    tgt = [4, 9, 8, 6, 3, 28, 11, 6, 9, 2] * 20
    batches = token_batches(src, tgt, 64, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for b in batches:
        assert len(b) == 1 or len(b) * max(max(src[i], tgt[i]) for i in b) <= 64
    assert batches == token_batches(src, tgt, 64, seed=1, epoch=0)
    assert batches != token_batches(src, tgt, 64, seed=1, epoch=1)


def test_lm_blocks_are_shifted_windows():
    blocks = lm_blocks([[5, 6, 7], [8, 9]], block_size=3, eos_id=2)
    assert blocks.tolist() == [[5, 6, 7, 2], [2, 8, 9, 2]]


def test_number_to_words():
    assert number_to_words(0) == "zero"
    assert number_to_words(4021) == "four thousand twenty-one"
    assert number_to_words(1_000_015) == "one million fifteen"
    assert number_to_words(999_999) == "nine hundred ninety-nine thousand nine hundred ninety-nine"


def test_multi30k_from_local_folder():
    splits = load_splits("multi30k", "de", "en", SHARED / "multi30k")
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (29000, 1014, 1000)
    assert splits.train.sources[0].startswith("Zwei junge")


def test_multi30k_download_checks_sha256(tmp_path):
    names = ["val.de.gz", "val.en.gz"]
    fetch_multi30k(names, tmp_path / "cache", base_url=(SHARED / "multi30k").as_uri())
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == names
    bad = tmp_path / "mirror"
    bad.mkdir()
    (bad / "val.de.gz").write_bytes(b"not the file")
    with pytest.raises(DataError, match="SHA-256"):
        fetch_multi30k(["val.de.gz"], tmp_path / "cache2", base_url=bad.as_uri())
    assert not list((tmp_path / "cache2").iterdir())
    assert set(MULTI30K_SHA256) >= set(names)


def test_offline_without_local_copy_says_to_pass_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    monkeypatch.setenv("AIAYN_MULTI30K_URL", "http://127.0.0.1:9/nothing")
    with pytest.raises(DataError, match="--data-dir"):
        load_splits("multi30k", "de", "en")


def test_tatoeba_both_directions_and_user_paths(tmp_path):
    en_zh = load_splits("tatoeba-cmn", "en", "zh", SHARED / "tatoeba-cmn")
    zh_en = load_splits("tatoeba-cmn", "zh", "en", SHARED / "tatoeba-cmn")
    assert en_zh.train.sources[:50] == zh_en.train.targets[:50] and len(en_zh.valid) == 865
    (tmp_path / "c.de").write_text("".join(f"satz {i}\n" for i in range(300)))
    (tmp_path / "c.en").write_text("".join(f"sentence {i}\n" for i in range(300)))
    user = load_splits(str(tmp_path / "c"), "de", "en")
    assert len(user.train) + len(user.valid) == 300 and len(user.valid) == 3
    with pytest.raises(DataError, match="neither a TSV"):
        load_splits(str(tmp_path / "missing"), "de", "en")


def test_lm_blocks_of_a_token_tensor():
    blocks = lm_blocks(torch.arange(10, 20), block_size=3, eos_id=2)
    assert blocks.tolist() == [[10, 11, 12, 13], [13, 14, 15, 16], [16, 17, 18, 19]]


def test_text_corpus_downloads_checks_and_reads_local_copies(tmp_path, monkeypatch):
    """tinyshakespeare: --data-dir takes the shared copy; without it the file is downloaded (here from a local
    server holding the same text) and checked against its SHA-256, and a wrong file is refused."""
    import functools
    import http.server
    import threading

    from aiayn.data.datasets import text_corpus

    assert text_corpus("tinyshakespeare", SHARED / "tinyshakespeare").name == "input.txt.gz"
    assert text_corpus("some/file.txt", None) == Path("some/file.txt")
    served = tmp_path / "served"
    served.mkdir()
    (served / "input.txt").write_bytes(gzip.decompress((SHARED / "tinyshakespeare" / "input.txt.gz").read_bytes()))
    (served / "wrong.txt").write_text("not shakespeare")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("AIAYN_TINYSHAKESPEARE_URL", f"{base}/wrong.txt")
        with pytest.raises(DataError, match="SHA-256"):
            text_corpus("tinyshakespeare", None)
        assert not (tmp_path / "cache" / "tinyshakespeare" / "input.txt").exists()
        monkeypatch.setenv("AIAYN_TINYSHAKESPEARE_URL", f"{base}/input.txt")
        path = text_corpus("tinyshakespeare", None)
        assert path.read_text().startswith("First Citizen:")
    finally:
        server.shutdown()
