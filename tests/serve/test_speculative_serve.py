"""``aiayn serve --draft``: speculative decoding inside the server's continuous batching. Requests running together
through the official ``openai`` client, each drafted with its own acceptance, get the text each gets without a
draft (greedy); sampled requests are drafted too; a request that asks for log-probabilities gets those plain decoding
gives, and with ``return_token_ids`` which tokens its draft guessed; /health and /metrics count the drafted and
accepted tokens."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from aiayn.inference.generator import TextGenerator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import GEMMA3, SMOLLM2, serving

openai = pytest.importorskip("openai")
PROMPTS = ["the cat ", "a dog a dog a dog ", "the the the ", "cat sat on the mat, cat sat on the ", "once "]


@pytest.fixture(scope="module")
def drafted(lm_run):
    """The tiny language model served with prompt lookup drafting; yields (its URL, a plain generator)."""
    generator = TextGenerator.from_checkpoint(lm_run, draft="ngram")
    limits = Limits(max_new_tokens=64)
    with serving(create_app(generator, limits, name="tiny-lm"), limits) as url:
        yield url, TextGenerator.from_checkpoint(lm_run)


def test_concurrent_drafted_requests_get_the_text_each_gets_without_a_draft(drafted):
    url, plain = drafted
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)

    def complete(prompt: str) -> str:
        done = client.completions.create(model="tiny-lm", prompt=prompt, max_tokens=40, temperature=0)
        return done.choices[0].text

    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # rows guess while alone in the batch (GUESSING_ROWS)
        texts = list(pool.map(complete, PROMPTS))
    assert texts == [plain.generate(p, 40, temperature=0)[0] for p in PROMPTS]
    assert complete(PROMPTS[1]) == texts[1]  # alone: drafted
    health = httpx.get(f"{url}/health").json()
    metrics = httpx.get(f"{url}/metrics").text
    drafted_tokens = health["drafted_tokens"]
    assert 0 < health["accepted_tokens"] <= drafted_tokens
    assert f"aiayn_draft_tokens {float(drafted_tokens)}" in metrics and "aiayn_draft_accepted_tokens" in metrics


def test_a_streamed_drafted_chat_of_several_tokens_a_pass_streams_them_all(drafted):
    url, plain = drafted
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    pieces = [c.choices[0].text for c in client.completions.create(
        model="tiny-lm", prompt=PROMPTS[1], max_tokens=30, temperature=0, stream=True)]
    assert "".join(pieces) == plain.generate(PROMPTS[1], 30, temperature=0)[0]


def test_sampled_and_logprobs_requests_are_served_beside_drafted_ones(drafted):
    url, plain = drafted
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    sampled = client.completions.create(model="tiny-lm", prompt="a dog", max_tokens=12, temperature=0.8, seed=4)
    assert sampled.usage.completion_tokens > 0
    scored = client.completions.create(model="tiny-lm", prompt="the cat ", max_tokens=10, temperature=0, logprobs=2)
    assert scored.choices[0].text == plain.generate("the cat ", 10, temperature=0)[0]
    assert len(scored.choices[0].logprobs.token_logprobs) == scored.usage.completion_tokens


def test_a_drafted_request_gets_plain_log_probabilities_and_the_tokens_its_draft_guessed(drafted, lm_run):
    url, plain = drafted
    body = {"model": "tiny-lm", "prompt": PROMPTS[1], "max_tokens": 30, "temperature": 0, "logprobs": 3,
            "return_token_ids": True}
    with serving(create_app(plain, Limits(max_new_tokens=64), name="tiny-lm"), Limits()) as plain_url:
        want = httpx.post(f"{plain_url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    got = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert got["text"] == want["text"] and got["token_ids"] == want["token_ids"] and "drafted" not in want
    assert got["logprobs"]["token_logprobs"] == pytest.approx(want["logprobs"]["token_logprobs"], abs=1e-4)
    assert [sorted(top) for top in got["logprobs"]["top_logprobs"]] == [sorted(t) for t in
                                                                         want["logprobs"]["top_logprobs"]]
    assert len(got["drafted"]) == len(got["token_ids"]) and 0 < sum(got["drafted"]) < len(got["drafted"])


@pytest.mark.long
def test_a_translator_served_with_a_prophet_translates_greedy_requests_as_without_it(trained_run, ctc_run):
    """``aiayn serve --draft CTC_RUN`` of a translator: greedy requests are drafted by the CTC model's whole
    translation and verified in the running batch (the text greedy gives); beam requests decode plainly."""
    from fastapi.testclient import TestClient

    from aiayn.inference.translator import Translator

    plain = Translator.from_checkpoint(trained_run, beam_size=1)
    texts = ["a b c d", "f g h i j", "k l m"]
    app = create_app(Translator.from_checkpoint(trained_run, draft=str(ctc_run), beam_size=1), Limits())
    with TestClient(app) as client:
        got = [client.post("/translate", json={"text": t, "beam_size": 1}).json()["translation"] for t in texts]
        beam = client.post("/translate", json={"text": texts[0], "beam_size": 3}).json()["translation"]
        health = client.get("/health").json()
    assert got == plain.translate(texts) and beam
    assert health["accepted_tokens"] > 0


def test_a_drafted_json_schema_request_gets_the_constrained_text(drafted):
    """POST /generate with a JSON schema on the drafted server: each drafted position masked by the grammar, the
    text plain constrained greedy's."""
    url, plain = drafted
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'
    ask = {"prompt": PROMPTS[1], "max_new_tokens": 30, "temperature": 0, "json_schema": schema}
    got = httpx.post(f"{url}/generate", json=ask, timeout=60).json()["text"]
    assert got == plain.generate(PROMPTS[1], 30, temperature=0, json_schema=schema)[0]


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2, GEMMA3)
def test_real_models_served_with_a_draft_answer_the_openai_client_as_without_one():
    """SmolLM2-135M-Instruct and Gemma 3 270M (its sliding-window rings rolled back), each served with prompt lookup
    and asked to go on repeating a list, through the official ``openai`` client: the plain library's greedy text,
    drafted (accepted tokens counted)."""
    from aiayn.serve.server import load_product

    items = ", ".join(f"item {i}: {w}" for i, w in enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime"]))
    prompt = f"List: {items}.\nThe same list again: item 0:"
    for path in (SMOLLM2, GEMMA3):
        product, _ = load_product(str(path), draft="ngram")
        want = TextGenerator.from_checkpoint(path).generate(prompt, 48, temperature=0)[0]
        limits = Limits(max_new_tokens=64)
        with serving(create_app(product, limits, name="m"), limits) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
            done = client.completions.create(model="m", prompt=prompt, max_tokens=48, temperature=0)
            health = httpx.get(f"{url}/health").json()
        assert done.choices[0].text == want, path
        assert health["accepted_tokens"] > 0, path
