"""The OpenAI-compatible API, driven by the official ``openai`` client against a live ``aiayn serve``: models,
completions (greedy = the library, seeded sampling = the library, stop strings, log-probabilities, n, usage,
streaming), chat completions through the model's chat template, embeddings, errors, and the API key."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest
import torch

from aiayn import generate
from aiayn.inference.embed import Embedder
from aiayn.inference.generator import TextGenerator
from serve.test_family import alone

from conftest import wait_until_serving

openai = pytest.importorskip("openai")
KEY = "test-key-not-secret"


@contextmanager
def live_server(checkpoint, name: str):
    """``aiayn serve`` in a process of its own, with an API key; yields its /v1 address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AIAYN_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(checkpoint), "--port",
                             str(port), "--model-name", name, "--max-new-tokens", "256"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    live_server.last = proc
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def client_for(url: str):
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def lm(lm_run):
    with live_server(lm_run, "tiny-lm") as url:
        yield client_for(url), TextGenerator.from_checkpoint(lm_run)


def test_models_and_greedy_completion_equal_the_library(lm):
    client, generator = lm
    assert [m.id for m in client.models.list().data] == ["tiny-lm"]
    done = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=20, temperature=0)
    assert done.choices[0].text == generator.generate("the cat ", 20, temperature=0)[0]
    assert done.choices[0].finish_reason == "length" and done.object == "text_completion"
    assert done.usage.prompt_tokens == len(generator.prompt_ids("the cat ")) and done.usage.completion_tokens == 20


def test_seeded_sampling_and_n_choices(lm):
    client, generator = lm
    done = client.completions.create(model="tiny-lm", prompt="a dog", max_tokens=15, temperature=1.2, seed=5, n=2)
    texts = [c.text for c in sorted(done.choices, key=lambda c: c.index)]
    drawn = [alone(generator, "a dog", 15, 1.2, seed) for seed in (5, 6)]
    assert texts == [generator.tokenizer.decode(ids) for ids in drawn]  # choice k draws with seed + k, as the
    assert done.usage.completion_tokens == sum(len(ids) for ids in drawn)  # library draws for that seed alone


def test_penalties_min_p_and_top_k_reach_the_decoding_as_the_library_takes_them(lm):
    """OpenAI's frequency_penalty and presence_penalty, vLLM's top_k, min_p and repetition_penalty."""
    client, generator = lm
    penalties = {"frequency_penalty": 2.0, "presence_penalty": 2.0}
    extra = {"repetition_penalty": 1.3, "top_k": 5, "min_p": 0.1}
    done = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=20, temperature=0, **penalties,
                                     extra_body={"repetition_penalty": 3.0})
    want = generator.generate("the cat ", 20, temperature=0, repetition_penalty=3.0, **penalties)[0]
    assert done.choices[0].text == want != generator.generate("the cat ", 20, temperature=0)[0]
    sampled = client.completions.create(model="tiny-lm", prompt="a dog", max_tokens=15, temperature=1.5, seed=3,
                                        extra_body=extra)
    assert sampled.choices[0].text == generator.generate("a dog", 15, temperature=1.5, seed=3, **extra)[0]
    with pytest.raises(openai.BadRequestError, match="min_p"):
        client.completions.create(model="tiny-lm", prompt="a", max_tokens=2, extra_body={"min_p": 1.5})


def test_logit_bias_moves_the_scores_before_the_choice_as_the_library_takes_it(lm):
    """OpenAI's ``logit_bias`` (token ids as text, -100 to 100, added to the scores before the choice): a ban on the
    greedy text's first tokens keeps them out and gives the library's text under the same bias, greedy and sampled;
    a token pushed by 100 is every token; a bias out of range or an id outside the vocabulary is a 400 naming it."""
    client, generator = lm
    prompt = generator.prompt_ids("the cat ")
    ask = dict(model="tiny-lm", prompt="the cat ", max_tokens=20, extra_body={"return_token_ids": True})
    plain = client.completions.create(**ask, temperature=0).choices[0].model_dump()["token_ids"]
    banned = {str(t): -100 for t in plain[:3]}
    for sampling in ({"temperature": 0}, {"temperature": 1.5, "seed": 3}):
        ids = client.completions.create(**ask, **sampling, logit_bias=banned).choices[0].model_dump()["token_ids"]
        want = generate(generator.model, torch.tensor([prompt]), max_new_tokens=20, logit_bias=banned, **sampling)[0]
        assert ids == want and not set(ids) & set(plain[:3]), sampling
    pushed = prompt[1]  # a character of the prompt, not the end of the text
    done = client.completions.create(**{**ask, "max_tokens": 6}, temperature=0, logit_bias={str(pushed): 100})
    assert done.choices[0].model_dump()["token_ids"] == [pushed] * 6
    for bad in ({"1": 101}, {str(generator.model.config.vocab_size): 1}, {"a": 1}):
        with pytest.raises(openai.BadRequestError, match="logit_bias"):
            client.completions.create(model="tiny-lm", prompt="a", max_tokens=2, logit_bias=bad)


def test_return_token_ids_gives_the_prompt_and_the_tokens_as_decoded(lm):
    """vLLM's return_token_ids: each choice's prompt_token_ids, and the token_ids of its text; a stream sends the
    prompt's once (first chunk) and each chunk's own ids."""
    client, generator = lm
    prompt = generator.prompt_ids("the cat ")
    ids = generate(generator.model, torch.tensor([prompt]), "greedy", max_new_tokens=12)[0]
    done = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=12, temperature=0,
                                     extra_body={"return_token_ids": True})
    choice = done.choices[0].model_dump()
    assert choice["prompt_token_ids"] == prompt and choice["token_ids"] == ids
    assert generator.tokenizer.decode(ids) == choice["text"]
    chunks = [c.choices[0].model_dump() for c in client.completions.create(
        model="tiny-lm", prompt="the cat ", max_tokens=12, temperature=0, stream=True,
        extra_body={"return_token_ids": True})]
    assert chunks[0]["prompt_token_ids"] == prompt and all("prompt_token_ids" not in c for c in chunks[1:])
    assert [t for c in chunks for t in c["token_ids"]] == ids
    plain = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=2).choices[0].model_dump()
    assert "token_ids" not in plain and "prompt_token_ids" not in plain


def test_stop_strings_cut_the_text(lm):
    client, generator = lm
    greedy = generator.generate("the cat ", 30, temperature=0)[0]
    stop = greedy[8:11]
    done = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=30, temperature=0, stop=[stop])
    assert done.choices[0].text == greedy[: greedy.index(stop)] and done.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=30, temperature=0,
                                         stop=stop, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == greedy[: greedy.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_logprobs_of_a_greedy_completion(lm):
    client, generator = lm
    done = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=8, temperature=0, logprobs=3)
    lp = done.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == done.choices[0].text and lp.text_offset[0] == 0
    for chosen, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 3 and logprob <= 0
        assert abs(logprob - max(top.values())) < 1e-6 and top[chosen] == pytest.approx(logprob)  # greedy: the top
    # the model's own log-softmax over the whole text, position by position
    prompt = generator.prompt_ids("the cat ")
    ids = prompt + generate(generator.model, torch.tensor([prompt]), "greedy", max_new_tokens=8)[0]
    with torch.no_grad():
        logp = generator.model(torch.tensor([ids]))[0].float().log_softmax(-1)  # (T, V)
    expected = [float(logp[len(prompt) - 1 + i, ids[len(prompt) + i]]) for i in range(8)]
    assert lp.token_logprobs == pytest.approx(expected, abs=1e-4)


def test_echo_scores_the_prompt_as_evaluation_harnesses_ask(lm):
    """lm-evaluation-harness's request: token ids, ``echo``, ``logprobs``, ``max_tokens`` 0: the prompt back with
    each token's log-probability given the ones before (the first ``null``), the model's own log-softmax; with
    ``max_tokens`` above 0, the prompt's tokens then the completion's."""
    client, generator = lm
    ids = generator.prompt_ids("the cat sat")
    with torch.no_grad():
        logp = generator.model(torch.tensor([ids]))[0].float().log_softmax(-1)  # (T, V)
    expected = [float(logp[t - 1, ids[t]]) for t in range(1, len(ids))]
    scored = client.completions.create(model="tiny-lm", prompt=[ids], max_tokens=0, echo=True, logprobs=1)
    choice = scored.choices[0]
    assert choice.text == generator.tokenizer.decode(ids) and scored.usage.completion_tokens == 0
    assert choice.logprobs.token_logprobs[0] is None and choice.logprobs.top_logprobs[0] is None
    assert choice.logprobs.token_logprobs[1:] == pytest.approx(expected, abs=1e-4)
    assert all(len(top) == 1 for top in choice.logprobs.top_logprobs[1:])
    both = client.completions.create(model="tiny-lm", prompt="the cat sat", max_tokens=4, temperature=0, echo=True,
                                     logprobs=2).choices[0]
    assert both.text.startswith("the cat sat") and len(both.logprobs.tokens) == len(ids) + 4
    assert both.logprobs.token_logprobs[1:len(ids)] == pytest.approx(expected, abs=1e-4)
    assert "".join(both.logprobs.tokens) == generator.tokenizer.decode(ids) + both.text[len("the cat sat"):]
    for bad in ([[10 ** 9]], [[]], []):
        with pytest.raises(openai.BadRequestError, match="prompt"):
            client.completions.create(model="tiny-lm", prompt=bad, max_tokens=0)


def test_streamed_completion_equals_the_whole_one(lm):
    client, generator = lm
    chunks = list(client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == generator.generate("the cat ", 20,
                                                                                        temperature=0)[0]
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 20


def test_errors_are_openai_errors(lm):
    client, _ = lm
    with pytest.raises(openai.BadRequestError, match="best_of: not supported"):
        client.completions.create(model="tiny-lm", prompt="a", extra_body={"best_of": 2})
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="a")
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        client.chat.completions.create(model="tiny-lm", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model="tiny-lm", prompt="a", max_tokens=10_000)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model="tiny-lm", prompt="a", temperature=-1)


def test_metrics_count_requests_tokens_and_latencies(lm):
    """Prometheus' text format: one completion of 5 tokens moves each count by exactly what it did."""
    from prometheus_client.parser import text_string_to_metric_families

    client, generator = lm
    url = str(client.base_url).removesuffix("/v1/")
    auth = {"Authorization": f"Bearer {KEY}"}

    def scrape() -> dict:
        text = httpx.get(url + "/metrics", headers=auth).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    before = scrape()
    client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=5, temperature=0)
    assert httpx.get(url + "/metrics").status_code == 401  # behind the key, as every route but /health
    after = scrape()
    moved = {key: after[key] - before.get(key, 0) for key in after}
    assert moved[("aiayn_requests_total", (("endpoint", "/v1/completions"), ("status", "200")))] == 1
    assert moved[("aiayn_requests_total", (("endpoint", "/metrics"), ("status", "401")))] == 1
    assert moved[("aiayn_requests_total", (("endpoint", "/metrics"), ("status", "200")))] == 1  # the first scrape
    assert moved[("aiayn_generation_tokens_total", ())] == 5
    assert moved[("aiayn_prompt_tokens_total", ())] == len(generator.prompt_ids("the cat "))
    assert moved[("aiayn_time_to_first_token_seconds_count", ())] == 1
    assert moved[("aiayn_inter_token_latency_seconds_count", ())] == 4  # 5 tokens, 4 gaps
    assert ("aiayn_running_rows", ()) in after and ("aiayn_prefix_cache_bytes", ()) in after
    # one prompt, too short for a whole block: a miss, no hit
    assert moved[("aiayn_prefix_cache_misses", ())] == 1 and moved[("aiayn_prefix_cache_hits", ())] == 0


def test_the_api_key_guards_every_route_but_health_and_the_pages_files(lm):
    """The page and its scripts hold no data and come without the key (the page asks for it, and sends it)."""
    client, _ = lm
    url = str(client.base_url).rstrip("/")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    root = url.removesuffix("/v1")
    schema = httpx.get(root + "/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    routes = [(method, path) for path, ops in schema["paths"].items() for method in ops if path != "/health"]
    routes += [("get", "/docs"), ("get", "/openapi.json"), ("get", "/metrics"), ("post", "/"),
               ("post", "/static/app.js")]
    assert len(routes) > 10 and ("post", "/tokenize") in routes
    for method, path in routes:  # every route the server has, without a key and with a wrong one
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            answer = httpx.request(method.upper(), root + path, headers=headers, json={})
            assert answer.status_code == 401, (method, path, headers, answer.status_code)
    assert httpx.get(root + "/health").status_code == 200
    for page in ("/", "/complete", "/static/chat.js", "/static/i18n.js"):
        assert httpx.get(root + page).status_code == 200, page


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from aiayn.cli import main
    from interop.conftest import llama_folder

    folder = llama_folder(tmp_path_factory.mktemp("chat") / "hf")
    assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
    with live_server(folder.parent / "ckpt", "tiny-llama") as url:
        yield client_for(url), TextGenerator.from_checkpoint(
            folder.parent / "ckpt")


def test_chat_renders_the_models_template(llama):
    client, generator = llama
    messages = [{"role": "system", "content": "w5 w6"}, {"role": "user", "content": "w7 w8 w9"}]
    ids = generator.chat_ids(messages)  # the template writes the one BOS; the tokenizer adds none
    assert ids[0] == generator.model.config.bos_id and ids[1] != ids[0]
    expected = generator.generate(ids, 10, temperature=0)[0]
    done = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=10, temperature=0,
                                          logprobs=True, top_logprobs=2)
    message = done.choices[0].message
    assert message.role == "assistant" and message.content == expected and done.object == "chat.completion"
    assert done.usage.prompt_tokens == len(ids)
    assert len(done.choices[0].logprobs.content) == done.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 for t in done.choices[0].logprobs.content)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=10,
                                                 temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected


@pytest.fixture(scope="module")
def encoder(mlm_run):
    with live_server(mlm_run, "tiny-bert") as url:
        yield client_for(url), Embedder.from_checkpoint(mlm_run)


def test_embeddings_equal_the_library(encoder):
    client, embedder = encoder
    texts = ["the cat sat on the mat .", "a dog"]
    expected = embedder.embed(texts)
    for fmt in (openai.NOT_GIVEN, "float"):  # unasked, the client asks for base64 and decodes it
        done = client.embeddings.create(model="tiny-bert", input=texts, encoding_format=fmt)
        got = torch.tensor([d.embedding for d in sorted(done.data, key=lambda d: d.index)])
        assert torch.allclose(got, expected, atol=1e-6), fmt
    assert done.usage.prompt_tokens == sum(len(embedder.ids(t)) for t in texts)
    with pytest.raises(openai.BadRequestError, match="dimensions: not supported"):
        client.embeddings.create(model="tiny-bert", input="a", dimensions=8)


def test_sigterm_finishes_the_streams_in_flight_refuses_new_work_and_exits_0(lm_run):
    """After SIGTERM a stream already running ends whole ([DONE]); a new request is not served; exit code 0."""
    import signal
    import threading

    with live_server(lm_run, "tiny-lm") as url:
        proc = live_server.last
        client = client_for(url)
        stream = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=60, temperature=0,
                                           stream=True)
        chunks = iter(stream)
        first = next(chunks)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        refused = []

        def knock():
            try:
                refused.append(httpx.post(url + "/completions", json={"model": "tiny-lm", "prompt": "a"},
                                          headers={"Authorization": f"Bearer {KEY}"}, timeout=5).status_code)
            except httpx.HTTPError as err:  # the listening socket is closed
                refused.append(type(err).__name__)

        knocker = threading.Thread(target=knock)
        knocker.start()
        rest = list(chunks)
        knocker.join()
        # the docs' promise: 503 for a request that still reaches it, else no listening socket; never a 500 or a hang
        assert refused and refused[0] in (503, "ConnectError", "RemoteProtocolError"), refused
        text = first.choices[0].text + "".join(c.choices[0].text for c in rest)
        assert rest[-1].choices[0].finish_reason == "length" and len(text) == 60  # a character model: 60 tokens
        assert proc.wait(timeout=60) == 0


def test_a_client_that_gives_up_on_a_whole_answer_frees_its_rows(lm):
    """A non-streamed completion whose client disconnects is cancelled at the next step (/health counts it),
    not decoded to its end."""
    client, _ = lm
    url = str(client.base_url).removesuffix("/v1/")
    auth = {"Authorization": f"Bearer {KEY}"}
    before = httpx.get(url + "/health").json()
    body = {"model": "tiny-lm", "prompt": "the cat ", "max_tokens": 256, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):  # 16 choices of 256 tokens take far longer than 0.05 s
        httpx.post(url + "/v1/completions", json={**body, "n": 16}, headers=auth, timeout=0.05)
    for _ in range(1000):
        if (health := httpx.get(url + "/health").json())["cancelled"] >= before["cancelled"] + 16:
            break
        time.sleep(0.01)
    assert health["cancelled"] == before["cancelled"] + 16 and health["open_requests"] == 0
    # greedy runs all 256 tokens here (no end id), so without the cancel the batch takes 256 steps; with it the
    # rows leave once the disconnect is seen (checked every 50 ms), well before: a margin for a fast machine
    assert health["steps"] - before["steps"] < 224
