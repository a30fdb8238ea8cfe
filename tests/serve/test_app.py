"""The HTTP server: API through a client, limits, malformed input, errors, and continuous batching of translations."""

import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from aiayn.inference.translator import Translator
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import Scheduler
from aiayn.serve.server import create_app

SENTENCES = ["a b c", "d e f g h", "i j", "k l m n o p", "q r s t", "u v w", "x y z a b c d", "e"]


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_checkpoint(trained_run, beam_size=2)


@pytest.fixture(scope="module")
def client(translator):
    limits = Limits(max_chars=50, max_texts=4, max_new_tokens=40, max_body_bytes=5000, max_attention_tokens=16)
    with TestClient(create_app(translator, limits), raise_server_exceptions=False) as c:
        yield c


def test_health_and_docs(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"]["arch"] == "encoder-decoder"
    assert health["limits"]["max_texts"] == 4
    assert "/translate" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


def test_translate_one_and_many(client, translator):
    assert client.post("/translate", json={"text": "a b c d"}).json() == {
        "translation": translator.translate(["a b c d"])[0]}
    texts = SENTENCES[:4]
    assert client.post("/translate", json={"texts": texts}).json() == {"translations": translator.translate(texts)}


def test_decoding_options(client, translator):
    greedy = client.post("/translate", json={"text": "f g h i", "beam_size": 1}).json()["translation"]
    assert greedy == translator.translate(["f g h i"], beam_size=1)[0]
    short = client.post("/translate", json={"text": "a b c d e f g h", "max_new_tokens": 2}).json()["translation"]
    assert len(translator.tokenizers.tgt.encode(short)) <= 2


@pytest.mark.parametrize("body, status, words", [
    ({"texts": ["a"] * 5}, 413, "text: 5 texts; the server takes 4"),
    ({"text": "a " * 40}, 413, "characters"),
    ({"text": "a", "max_new_tokens": 41}, 422, "max_new_tokens"),
    ({"text": "a", "beam_size": 0}, 422, "beam_size"),
    ({"text": "a", "texts": ["b"]}, 422, "exactly one"),
    ({}, 422, "exactly one"),
    ({"texts": []}, 422, "at least 1 item"),
    ({"text": "a", "colour": "red"}, 422, "colour"),
    ({"text": 5}, 422, "text"),
])
def test_limits_and_bad_requests(client, body, status, words):
    response = client.post("/translate", json=body)
    assert response.status_code == status
    assert words in str(response.json()["detail"])


def test_malformed_json_and_huge_body(client):
    response = client.post("/translate", content=b'{"text": "a b', headers={"content-type": "application/json"})
    assert response.status_code == 422
    response = client.post("/translate", content=b'{"text": "' + b"a" * 6000 + b'"}',
                           headers={"content-type": "application/json"})
    assert response.status_code == 413 and "bytes" in response.json()["detail"]
    chunked = iter([b'{"text": "'] + [b"a" * 1000] * 6 + [b'"}'])  # no content-length: counted as it arrives
    response = client.post("/translate", content=chunked, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "bytes" in response.json()["detail"]


def test_internal_error_does_not_kill_the_server(client, translator, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(translator.model, "step", broken)  # the scheduler's decoding step fails
    response = client.post("/translate", json={"text": "a b"})
    assert response.status_code == 500 and "RuntimeError" in response.json()["detail"]
    monkeypatch.undo()
    assert client.post("/translate", json={"text": "a b"}).status_code == 200


def test_attention_endpoint(client, translator):
    data = client.post("/attention", json={"source": "a b c"}).json()
    assert data["translation"] == translator.translate(["a b c"])[0]
    n_src, n_tgt = len(data["source_tokens"]), len(data["target_tokens"])
    cross = data["attention"]["cross"]
    assert len(cross) == translator.model.config.n_decoder_layers and len(cross[0]) == data["heads"]
    assert (len(cross[0][0]), len(cross[0][0][0])) == (n_tgt, n_src)
    assert client.post("/attention", json={"source": "a" * 51}).status_code == 413
    long = " ".join("abcdefghij" * 2)  # 20 letters: at least 20 tokens > max_attention_tokens=16
    assert "tokens" in client.post("/attention", json={"source": long}).json()["detail"]
    assert client.post("/attention", json={"target": "a"}).status_code == 422


def test_inside_one_head_equals_the_attention_weights(client):
    maps = client.post("/attention", json={"source": "a b c"}).json()
    for kind, layer, head, query in (("cross", 1, 2, 1), ("encoder", 0, 3, 0), ("decoder_self", 1, 0, 2)):
        body = {"source": "a b c", "kind": kind, "layer": layer, "head": head, "query": query}
        inside = client.post("/attention/head", json=body).json()
        assert inside["weights"] == maps["attention"][kind][layer][head][query]
        assert len(inside["keys"]) == len(inside["scores"]) == len(inside["mask"]) == len(inside["weights"])
        assert len(inside["query"]) == len(inside["output"]) == len(inside["keys"][0])
    bad = client.post("/attention/head", json={"source": "a b c", "kind": "encoder", "query": 50})
    assert bad.status_code == 404 and "query: 50 is not a token position" in bad.json()["detail"]  # no such row
    assert client.post("/attention/head", json={"source": "a b", "kind": "upward"}).status_code == 422
    assert client.post("/attention/head", json={"source": "a b", "layer": -1}).status_code == 422


def test_the_page_is_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "Translate" in page.text and "/static/app.js" in page.text
    assert client.get("/static/app.js").status_code == 200


OPTIONS = [{}, {"beam_size": 1}, {"beam_size": 3, "length_penalty": 0.6}, {"strategy": "sample", "seed": 4},
           {"beam_size": 2, "max_new_tokens": 3}, {"beam_size": 1, "min_new_tokens": 4}]


def test_concurrent_requests_share_the_batch_and_equal_each_alone(live_server, translator):
    """Greedy, beam (rows = beam size) and seeded sampling requests of different lengths, all at once: each
    answer is the library's for that text alone, and requests shared decoding steps."""
    url, app = live_server
    asks = [(s, OPTIONS[i % len(OPTIONS)]) for i, s in enumerate(SENTENCES * 2)]
    alone = [translator.translate([s], **o)[0] for s, o in asks]
    before = app.state.batcher.stats()
    barrier, results = threading.Barrier(len(asks)), {}

    def ask(i, sentence, options):
        barrier.wait()
        body = {"text": sentence, **options}
        results[i] = httpx.post(f"{url}/translate", json=body, timeout=60).json()["translation"]

    threads = [threading.Thread(target=ask, args=(i, *a)) for i, a in enumerate(asks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(asks))] == alone
    after = app.state.batcher.stats()
    assert after["largest_batch"] > 3 and after["joined"] - before["joined"] == len(asks)
    assert after["steps"] - before["steps"] < sum(len(a.split()) for a in alone) + len(asks)  # shared steps
    assert after["open_requests"] == 0


def test_encoder_work_is_grouped_by_options_and_an_error_fails_its_batch_only(translator):
    calls = []

    def work(texts, options):
        calls.append(list(texts))
        if "bad" in texts:
            raise ValueError("bad input")
        return [t.upper() if options == "up" else t for t in texts]

    scheduler = Scheduler(translator.model, max_batch=100, encode=work, wait_ms=50)
    scheduler.start()
    try:
        outs = [scheduler.submit_encoder([f"t{i}", f"u{i}"], "up") for i in range(6)]
        outs = [f.result(timeout=10) for f in outs]
        failed = scheduler.submit_encoder(["bad"], "up").exception(timeout=10)
        after = scheduler.submit_encoder(["ok"], "same").result(timeout=10)
    finally:
        scheduler.stop()
    assert outs == [[f"T{i}", f"U{i}"] for i in range(6)]
    assert len(calls[0]) == 12  # the six requests went as one batch
    assert isinstance(failed, ValueError) and after == ["ok"]


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_numbers_are_422_not_500(client, value):
    raw = b'{"text": "a", "length_penalty": ' + value + b"}"
    response = client.post("/translate", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert "length_penalty" in str(response.json()["detail"])
    assert value.decode() not in response.text  # the offending value is not echoed


@pytest.mark.parametrize("path, raw", [("/translate", b'{"text": "abc \\ud800"}'),
                                       ("/translate", b'{"texts": ["ok", "x \\udfff y"]}'),
                                       ("/attention", b'{"source": "abc \\ud800"}'),
                                       ("/attention", b'{"source": "abc", "target": "\\ud800"}')])
def test_lone_surrogates_are_422_not_500(client, path, raw):
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    detail = str(response.json()["detail"])  # our check's words, or pydantic's where a field's pattern reads first
    assert "surrogate" in detail or "unicode string" in detail


def test_health_hides_the_checkpoint_path_and_docs_need_no_cdn(client):
    health = client.get("/health").text
    assert "/" not in health.replace("</", "")  # no filesystem path in the answer
    page = client.get("/docs").text
    assert "/openapi.json" in page and "cdn" not in page.lower() and "https://" not in page
    assert client.get("/redoc").status_code == 404


def test_a_text_translated_again_skips_the_encoder_and_answers_the_same(translator, monkeypatch):
    """The translator's prompt cache (``SourceCache``): the same text again reads its encoding (memory and
    cross-attention keys/values) from the cache, not the encoder, and answers the same; /health and /metrics
    count it."""
    app = create_app(translator, Limits())
    encodes, encode = [], type(translator.model).encode
    monkeypatch.setattr(type(translator.model), "encode",
                        lambda self, *a, **k: encodes.append(1) or encode(self, *a, **k))
    with TestClient(app) as c:
        first = c.post("/translate", json={"text": "k l m n o p"}).json()
        assert len(encodes) == 1
        assert c.post("/translate", json={"text": "k l m n o p"}).json() == first
        assert len(encodes) == 1 and first == {"translation": translator.translate(["k l m n o p"])[0]}
        health = c.get("/health").json()
        assert (health["prefix_hits"], health["prefix_misses"]) == (1, 1) and health["prefix_cache_bytes"] > 0
        assert "aiayn_prefix_cache_hits 1" in c.get("/metrics").text
