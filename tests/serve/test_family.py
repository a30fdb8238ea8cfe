"""Serving the other family members: continuous batching equal to alone, /generate with and without
Server-Sent Events, /fill-mask, and bad requests."""

import json
import threading
import time

import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.decoding.config import DecodingConfig
from aiayn.inference.fill_mask import MaskFiller
from aiayn.inference.generator import TextGenerator
from aiayn.serve.jobs import Finished
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import DecodeJob, Scheduler
from aiayn.serve.server import create_app

PROMPTS = ["the cat ", "a dog ran in the park 3 .\n", "t", "the cat sat on the mat . a dog", "park 1",
           "a ", "the mat . a dog ran in", "dog"]


@pytest.fixture(scope="module")
def generator(lm_run):
    return TextGenerator.from_checkpoint(lm_run)


def alone(generator, prompt: str, n: int, temperature: float, seed: int) -> list[int]:
    ids = torch.tensor([generator.prompt_ids(prompt)])
    strategy = "greedy" if temperature == 0 else "sample"
    return generate(generator.model, ids, strategy, max_new_tokens=n, temperature=temperature or 1.0, seed=seed)[0]


def gen_job(ids: list[int], n: int, emit, temperature: float = 1.0, seed: int | None = None,
            min_new_tokens: int = 0) -> DecodeJob:
    """A sampled (greedy at temperature 0) generation job of at most ``n`` tokens."""
    return DecodeJob(ids, DecodingConfig(strategy="sample", temperature=temperature, seed=seed, max_new_tokens=n,
                                         min_new_tokens=min_new_tokens), emit)


def test_continuous_batching_equals_each_request_alone(generator):
    batcher = Scheduler(generator.model, max_batch=4)
    results, done = {}, threading.Event()
    jobs = []
    for i, prompt in enumerate(PROMPTS):
        def emit(event, i=i):
            if isinstance(event, Finished):
                results[i] = event
                if len(results) == len(PROMPTS):
                    done.set()
        temperature = 0.0 if i % 2 else 1.3
        jobs.append(gen_job(generator.prompt_ids(prompt), 8 + 7 * i, emit, temperature, seed=i))
    batcher.start()
    try:
        for i, job in enumerate(jobs):
            batcher.submit(job)
            if i == 3:
                time.sleep(0.3)  # the rest arrive while the first ones are decoding
        assert done.wait(60)
    finally:
        batcher.stop()
    for i, job in enumerate(jobs):
        expected = alone(generator, PROMPTS[i], 8 + 7 * i, job.decoding.temperature, i)
        assert job.generated == expected, i
        assert results[i].completion_tokens == len(expected)
    assert batcher.largest_batch == 4 and batcher.joined == 8
    assert batcher.steps < sum(len(j.generated) for j in jobs)  # rows were decoded together


@pytest.fixture(scope="module")
def lm_client(generator):
    with TestClient(create_app(generator, Limits(max_chars=200, max_new_tokens=64)),
                    raise_server_exceptions=False) as client:
        yield client


def test_generate_json_equals_the_library(lm_client, generator):
    answer = lm_client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 20, "temperature": 0}).json()
    assert answer["text"] == generator.generate("the cat ", 20, temperature=0)[0]
    assert answer["prompt_tokens"] == len(generator.prompt_ids("the cat ")) and answer["finish_reason"] == "length"
    seeded = {"prompt": "a dog", "max_new_tokens": 30, "temperature": 1.2, "seed": 5}
    sampled = lm_client.post("/generate", json=seeded).json()
    assert sampled["text"] == generator.generate("a dog", 30, temperature=1.2, seed=5)[0]  # the library's draw
    assert sampled["text"] != generator.generate("a dog", 30, temperature=1.2, seed=6)[0]  # and the seed matters
    assert lm_client.get("/health").json()["joined"] >= 2
    options = {"repetition_penalty": 3.0, "frequency_penalty": 2.0, "presence_penalty": 2.0, "min_p": 0.1}
    penalised = lm_client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 20, "temperature": 0,
                                                  **options}).json()
    assert penalised["text"] == generator.generate("the cat ", 20, temperature=0, **options)[0] != answer["text"]
    assert lm_client.post("/generate", json={"prompt": "a", "min_p": 1.5}).status_code == 422
    banned = {str(t): -100 for t in generator.tokenizer.encode(answer["text"][:3])}  # OpenAI's object, as on /v1
    biased = lm_client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 20, "temperature": 0,
                                               "logit_bias": banned}).json()
    assert biased["text"] == generator.generate("the cat ", 20, temperature=0, logit_bias=banned)[0] != answer["text"]
    for bad in ({"1": 101}, {"x": 1}, "{}"):
        assert lm_client.post("/generate", json={"prompt": "a", "logit_bias": bad}).status_code == 422


def test_generate_streams_server_sent_events(lm_client):
    body = {"prompt": "the cat ", "max_new_tokens": 12, "temperature": 0, "stream": True}
    with lm_client.stream("POST", "/generate", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    tokens, final = events[:-1], events[-1]
    assert len(tokens) == final["completion_tokens"] == 12 and final["finish_reason"] == "length"
    assert "".join(e["text"] for e in tokens) == final["text"]


@pytest.mark.parametrize("body, status, words", [
    ({"prompt": ""}, 422, "at least 1 character"), ({"prompt": "a", "max_new_tokens": 65}, 422, "limit"),
    ({"prompt": "a", "colour": 1}, 422, "colour"), ({"prompt": "a", "temperature": -1}, 422, "temperature"),
    ({"prompt": "a " * 10**6}, 413, "request body over")])  # the body guard, sized for the context
def test_generate_bad_requests(lm_client, body, status, words):
    response = lm_client.post("/generate", json=body)
    assert response.status_code == status and words in str(response.json()["detail"])


def test_a_language_models_prompt_is_limited_in_tokens_not_characters(lm_client):
    """A prompt over ``--max-chars`` (200 here) reaches the model: its limit is the context, in tokens; the body
    guard is sized for it (32 bytes a token), and /health and /tokenize say the context."""
    answer = lm_client.post("/generate", json={"prompt": "the cat " * 60, "max_new_tokens": 2, "temperature": 0})
    assert answer.status_code == 200 and answer.json()["prompt_tokens"] > 200 // 4
    health = lm_client.get("/health").json()
    capacity = lm_client.app.state.batcher.capacity
    assert health["max_model_len"] == capacity and health["limits"]["max_body_bytes"] >= 32 * capacity


def test_a_prompt_and_continuation_over_the_context_is_422(generator):
    """The server's cache holds the prompt and its continuation (``capacity`` positions), or the request is 422."""
    with TestClient(create_app(generator, Limits(max_chars=5000, max_new_tokens=8192))) as client:
        capacity = client.app.state.batcher.capacity
        answer = client.post("/generate", json={"prompt": "the cat sat", "max_new_tokens": capacity})
        fits = client.post("/generate", json={"prompt": "the cat sat", "max_new_tokens": 4})
    assert answer.status_code == 422 and f"exceed the model's {capacity}" in answer.json()["detail"]
    assert fits.status_code == 200


def test_fill_mask_endpoint(mlm_run):
    filler = MaskFiller.from_checkpoint(mlm_run)
    with TestClient(create_app(filler), raise_server_exceptions=False) as client:
        masks = client.post("/fill-mask", json={"text": "the cat <mask> on the mat .", "top_k": 3}).json()["masks"]
        assert masks[0][0]["token"].strip() == "sat" and len(masks[0]) == 3
        response = client.post("/fill-mask", json={"text": "no mask here"})
        assert response.status_code == 422 and "<mask>" in str(response.json()["detail"])
        assert client.get("/health").json()["model"]["arch"] == "encoder-only"


def _run(batcher, jobs):
    finished = threading.Semaphore(0)
    for job in jobs:
        emit = job.emit
        job.emit = lambda event, emit=emit: (emit(event), isinstance(event, Finished) and finished.release())
    for job in jobs:
        batcher.submit(job)
        assert finished.acquire(timeout=60)  # one after the other: the second finds the first's blocks


def test_prefix_blocks_are_reused_with_identical_outputs_and_evicted_under_a_cap(generator):
    from aiayn.decoding.prefix import PromptCache

    system = "the cat sat on the mat . a dog ran in the park 1 .\n"
    prompts = [system + "the cat ", system + "a dog ", "my bird "]  # the last shares not even its first token
    store = PromptCache(generator.model, block_size=8)
    batcher = Scheduler(generator.model, max_batch=2, prefix_cache=store)
    jobs = [gen_job(generator.prompt_ids(p), 12, lambda e: None, 0.0) for p in prompts]
    batcher.start()
    try:
        _run(batcher, jobs)
    finally:
        batcher.stop()
    for prompt, job in zip(prompts, jobs, strict=True):
        assert job.generated == alone(generator, prompt, 12, 0.0, 0)
    shared = len(generator.prompt_ids(system)) // 8
    first, second = (generator.prompt_ids(p) for p in prompts[:2])
    common = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert store.hits == 1 and store.misses == 2 and store.hit_tokens == common  # whole blocks, then the rest
    assert store.stats()["prefix_cache_bytes"] == store.bytes > 0
    small = PromptCache(generator.model, block_size=8, max_bytes=store.bytes // 3)
    small.store(generator.prompt_ids(system), *_one_row_cache(generator, system))
    assert small.bytes <= small.max_bytes and 0 < len(small.blocks) < shared


def _one_row_cache(generator, text):
    ids = generator.prompt_ids(text)
    cache = generator.model.new_cache(1, 200, next(generator.model.parameters()))
    generator.model.decode(torch.tensor([ids[:-1]]), cache=cache)
    return cache, 0, len(ids) - 1


def test_a_cancelled_request_leaves_the_batch(generator):
    batcher = Scheduler(generator.model, max_batch=4)
    events = []
    job = gen_job(generator.prompt_ids("the cat "), 100, events.append, 1.0, seed=1)
    batcher.start()
    try:
        batcher.submit(job)
        deadline = time.monotonic() + 30
        while len(events) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        job.cancelled = True
        at_cancel, tokens_then = batcher.steps, len(events)
        while not isinstance(events[-1], Finished) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        batcher.stop()
    assert events[-1].finish_reason == "cancelled" and not batcher.rows and batcher.engine.tokens is None
    assert batcher.steps - at_cancel <= 2 and len(events) - 1 - tokens_then <= 2  # gone at the next step, not at 100


def test_lm_attention_is_causal_per_layer_and_head(generator):
    limits = Limits(max_attention_tokens=20)
    with TestClient(create_app(generator, limits), raise_server_exceptions=False) as client:
        answer = client.post("/attention", json={"text": "the cat sat"}).json()
        n, cfg = len(answer["tokens"]), generator.model.config
        weights = torch.tensor(answer["attention"]["decoder_self"])  # (L, H, T, T)
        assert weights.shape == (cfg.n_decoder_layers, cfg.n_heads, n, n) and answer["heads"] == cfg.n_heads
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-3)  # every row sums to 1
        assert weights.triu(diagonal=1).abs().max() == 0  # nothing from the future
        assert client.post("/attention", json={"text": ""}).status_code == 422
        too_long = client.post("/attention", json={"text": "a" * 21})
        assert too_long.status_code == 413 and "20" in too_long.json()["detail"]
        for layer, head, query in ((0, 0, 0), (1, 3, n - 1)):
            inside = client.post("/attention/head", json={"text": "the cat sat", "layer": layer, "head": head,
                                                          "query": query}).json()
            assert inside["weights"] == answer["attention"]["decoder_self"][layer][head][query]
            assert inside["mask"] == [j <= query for j in range(n)] and inside["query_token"] == answer["tokens"][query]
        assert client.post("/attention/head", json={"text": "the cat", "head": 99}).status_code == 422


def test_lm_attention_takes_token_ids_and_one_row(generator):
    """A conversation's ids as decoded (no re-tokenizing) and one token's row of every layer and head: the same
    numbers as the whole picture of the text."""
    limits = Limits(max_attention_tokens=20)
    ids = generator.tokenizer.encode("the cat sat")
    with TestClient(create_app(generator, limits), raise_server_exceptions=False) as client:
        whole = client.post("/attention", json={"text": "the cat sat"}).json()
        assert client.post("/attention", json={"ids": ids}).json() == whole
        row = client.post("/attention", json={"ids": ids, "row": 4}).json()
        assert row["tokens"] == whole["tokens"] and "experts" not in row
        assert row["attention"]["decoder_self"] == [[h[4:5] for h in layer] for layer in whole["attention"]
                                                    ["decoder_self"]]
        inside = client.post("/attention/head", json={"ids": ids, "layer": 1, "head": 2, "query": 4}).json()
        assert inside["weights"] == whole["attention"]["decoder_self"][1][2][4]
        for body, code in (({"ids": ids, "row": len(ids)}, 404), ({"ids": [len(generator.tokenizer)]}, 422),
                           ({"ids": ids, "text": "a"}, 422), ({"ids": []}, 422), ({"ids": [5] * 21}, 413)):
            assert client.post("/attention", json=body).status_code == code, body


def test_generate_over_the_stream_cap_is_429(generator):
    app = create_app(generator, Limits(max_streams=1))
    with TestClient(app, raise_server_exceptions=False) as client:
        batcher = app.state.batcher
        assert client.post("/generate", json={"prompt": "a", "max_new_tokens": 4}).status_code == 200
        assert client.get("/health").json()["open_requests"] == 0  # a finished request holds no slot
        batcher.stop()  # the decoding thread is gone: a submitted request stays open
        batcher.submit(gen_job(generator.prompt_ids("a"), 4, lambda e: None))
        busy = client.post("/generate", json={"prompt": "a", "max_new_tokens": 4})
        assert busy.status_code == 429 and "limit is 1" in busy.json()["detail"]


def test_a_client_that_disconnects_mid_stream_frees_its_row(generator):
    import httpx

    from conftest import serving

    limits = Limits(max_new_tokens=900)
    app = create_app(generator, limits)
    with serving(app, limits) as url:
        body = {"prompt": "the cat ", "max_new_tokens": 900, "temperature": 1.0, "seed": 0, "stream": True}
        with httpx.stream("POST", f"{url}/generate", json=body) as response:
            events = (json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: "))
            assert all("id" in next(events) for _ in range(3))  # three tokens arrived, then the client leaves
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{url}/health").json())["open_requests"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health["open_requests"] == 0 and health["cancelled"] == 1
        assert not app.state.batcher.rows and app.state.batcher.engine.tokens is None
        assert health["steps"] < 100  # freed within steps of the disconnect, not decoded on towards 900 tokens


def test_generate_refuses_bad_decoding_options_with_422(lm_run):
    from fastapi.testclient import TestClient

    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.server import create_app

    with TestClient(create_app(TextGenerator.from_checkpoint(lm_run))) as client:
        for bad, field in [({"top_k": -2}, "top_k"), ({"top_p": 1.5}, "top_p"), ({"temperature": -1}, "temperature"),
                           ({"strategy": "mask-predict"}, "strategy"), ({"num_return_sequences": 2},
                                                                        "num_return_sequences"),
                           ({"json_schema": '{"type": "nonsense"}'}, "json_schema")]:
            answer = client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 5, **bad})
            assert answer.status_code == 422 and field in answer.text, (bad, answer.text)
        ok = client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 5, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["completion_tokens"] <= 5
        generator = TextGenerator.from_checkpoint(lm_run)
        beam = client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 5, "strategy": "beam",
                                              "beam_size": 3}).json()  # the best beam, as the library's
        assert beam["text"] == generator.generate("the cat ", 5, strategy="beam", beam_size=3)[0]


def test_min_new_tokens_holds_off_the_end_as_the_library_does(generator, monkeypatch):
    """A model that wants to end at once (EOS boosted): the batcher writes exactly min_new_tokens tokens, then
    ends with "stop", the tokens the library's greedy decoding gives with the same minimum."""
    model, eos = generator.model, generator.model.config.eos_id
    step = model.step

    def eager_to_end(tokens, state, last=False):
        logits = step(tokens, state, last).clone()
        logits[..., eos] += 50.0
        return logits

    monkeypatch.setattr(model, "step", eager_to_end)
    batcher = Scheduler(model, max_batch=2)
    jobs = [gen_job(generator.prompt_ids("the cat "), 20, lambda e: None, 0.0, min_new_tokens=m) for m in (0, 6)]
    batcher.start()
    try:
        _run(batcher, jobs)
    finally:
        batcher.stop()
    assert [len(j.generated) for j in jobs] == [0, 6] and all(j.finish_reason == "stop" for j in jobs)
    assert jobs[1].generated == alone_min(generator, "the cat ", 6)


def alone_min(generator, prompt: str, minimum: int) -> list[int]:
    ids = torch.tensor([generator.prompt_ids(prompt)])
    return generate(generator.model, ids, "greedy", max_new_tokens=20, min_new_tokens=minimum)[0]


def test_wait_and_batch_serving_answers_as_the_library(generator):
    """--batching static (for comparison with continuous batching): the same answers."""
    with TestClient(create_app(generator, Limits(max_chars=200, max_new_tokens=64), batching="static")) as client:
        assert client.app.state.batcher.static
        answer = client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 12, "temperature": 0})
        assert answer.json()["text"] == generator.generate("the cat ", 12, temperature=0)[0]


def test_one_prompt_cache_serves_the_library_and_the_server(generator):
    """Blocks that the library's ``PromptCache.add`` stored are what the continuous batcher reuses."""
    from aiayn.decoding.prefix import PromptCache

    system = "the cat sat on the mat . a dog ran in the park 2 .\n"
    store = PromptCache(generator.model, block_size=8)
    store.add(generator.prompt_ids(system))
    batcher = Scheduler(generator.model, max_batch=2, prefix_cache=store)
    job = gen_job(generator.prompt_ids(system + "the cat "), 12, lambda e: None, 0.0)
    batcher.start()
    try:
        _run(batcher, [job])
    finally:
        batcher.stop()
    assert store.hits == 1 and store.hit_tokens >= 40
    assert job.generated == alone(generator, system + "the cat ", 12, 0.0, 0)


def test_encoder_requests_that_arrive_together_are_one_batch_and_a_bad_one_fails_alone(mlm_run):
    """Concurrent /embed and /fill-mask requests go through one queue: fewer batches than requests, each
    answer equal to its request alone, and a text without <mask> is 422 for its own request only."""
    from concurrent.futures import ThreadPoolExecutor

    from aiayn.inference.embed import Embedder

    filler, embedder = MaskFiller.from_checkpoint(mlm_run), Embedder.from_checkpoint(mlm_run)
    texts = [f"the cat sat on the mat {i} ." for i in range(12)]
    app = create_app(filler, Limits(), max_batch=32, wait_ms=50.0, embedder=embedder)
    with TestClient(app) as client, ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda t: client.post("/embed", json={"texts": [t]}).json(), texts))
        assert client.get("/health").json()["batches"] < len(texts)
        for text, answer in zip(texts, answers, strict=True):
            assert torch.allclose(torch.tensor(answer["embeddings"][0]), embedder.embed([text])[0], atol=1e-5)
        bodies = [{"text": "the cat <mask> on the mat ."}, {"text": "no mask here"}] * 3
        codes = list(pool.map(lambda b: client.post("/fill-mask", json=b).status_code, bodies))
        assert codes == [200, 422] * 3


@pytest.mark.parametrize("bits", [8, 4])
def test_a_language_model_serves_in_int8_and_int4(lm_run, bits, bf16_kernels):
    """``aiayn serve --int8`` / ``--int4`` on a language model: int8 or int4 linear layers (bfloat16 activations, or
    int8 ones on a CPU without bfloat16 instructions: both forced), the routes as in float32; its greedy text stays
    close to float32's."""
    from aiayn.model.quantized import Int4Linear, Int8Linear

    int8 = TextGenerator.from_checkpoint(lm_run, int8=bits == 8, int4=bits == 4)
    kind = Int4Linear if bits == 4 else Int8Linear
    assert any(isinstance(m, kind) for m in int8.model.modules())
    with TestClient(create_app(int8, Limits(max_new_tokens=64))) as client:
        answer = client.post("/generate", json={"prompt": "the cat ", "max_new_tokens": 12, "temperature": 0})
    assert answer.status_code == 200 and answer.json()["completion_tokens"] == 12
    fp32 = TextGenerator.from_checkpoint(lm_run).generate("the cat ", 12, temperature=0)[0]
    assert answer.json()["text"] == int8.generate("the cat ", 12, temperature=0)[0]  # the server: the library's
    agree = sum(a == b for a, b in zip(answer.json()["text"], fp32, strict=False))
    assert agree >= 10, (answer.json()["text"], fp32)  # 12 of 12 in 8 runs (bench_learning_spread.py --measures
    # quantized, int8 and int4): at most 2 of 12 characters may differ


def test_max_model_len_caps_the_context_and_a_longer_prompt_is_refused_naming_it(generator):
    with TestClient(create_app(generator, Limits(max_model_len=48))) as client:
        assert client.app.state.batcher.capacity == 48 == client.get("/health").json()["max_model_len"]
        assert client.get("/v1/models").json()["data"][0]["max_model_len"] == 48
        ok = client.post("/v1/completions", json={"model": "aiayn", "prompt": "the cat", "max_tokens": 4})
        assert ok.status_code == 200
        long = client.post("/v1/completions", json={"model": "aiayn", "prompt": [5] * 60, "max_tokens": 1})
        assert long.status_code == 400 and "--max-model-len" in long.json()["error"]["message"]
        assert long.json()["error"]["code"] == "context_length_exceeded"


def test_the_prompt_cache_is_sized_for_the_model_by_default(generator):
    """``--prefix-cache-bytes -1`` (the default): four whole contexts of the model's keys and values, at most an
    eighth of the memory; /health and the start-up line say the cap."""
    from aiayn.decoding.prefix import sized_for, token_bytes
    from aiayn.serve.http import Served
    from aiayn.serve.server import startup_line

    app = create_app(generator, Limits())
    cache, capacity = app.state.batcher.prefix_cache, app.state.batcher.capacity
    cfg = generator.model.config
    per_token = cfg.n_decoder_layers * 2 * cfg.kv_heads * cfg.d_head * 4  # float32 keys and values
    assert token_bytes(generator.model) == per_token and cache.max_bytes == 4 * capacity * per_token
    assert sized_for(generator.model, capacity, share=1e-12) < cache.max_bytes  # the memory share caps it
    with TestClient(app) as client:
        assert client.get("/health").json()["prefix_cache_max_bytes"] == cache.max_bytes
    line = startup_line(Served(generator, app.state.batcher, Limits(), "tiny"))
    assert f"serving tiny (decoder-only, autoregressive), context {capacity} tokens, prompt cache up to" in line
    assert f"({cache.max_bytes // per_token} tokens)" in line
    assert create_app(generator, Limits(prefix_cache_bytes=0)).state.batcher.prefix_cache.max_bytes == 0


def test_one_size_limit_is_one_answer_on_every_route(generator, mlm_run):
    """Texts over ``--max-texts`` or ``--max-chars``: 413 naming the field on the native routes and on ``/v1`` alike
    (the same ``Limits.oversize``), never 400 on one and 413 on another."""
    from aiayn.inference.embed import Embedder

    limits = Limits(max_texts=2, max_chars=30)
    filler, embedder = MaskFiller.from_checkpoint(mlm_run), Embedder.from_checkpoint(mlm_run)
    with TestClient(create_app(filler, limits, embedder=embedder)) as client:
        name = client.get("/v1/models").json()["data"][0]["id"]
        for route, field in (("/embed", "texts"), ("/v1/embeddings", "input")):
            for texts in (["a", "b", "c"], ["a " * 20]):
                answer = client.post(route, json={field: texts, **({"model": name} if field == "input" else {})})
                assert answer.status_code == 413, (route, answer.text)
    with TestClient(create_app(generator, limits)) as client:
        name = client.get("/v1/models").json()["data"][0]["id"]
        answer = client.post("/v1/completions", json={"model": name, "prompt": ["a", "b", "c"]})
        assert answer.status_code == 413 and answer.json()["error"]["param"] == "prompt"
