"""Serving the other family members: continuous batching equal to alone, /generate with and without
Server-Sent Events, /fill-mask, and bad requests."""

import json
import threading
import time

import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.fill_mask import MaskFiller
from aiayn.generation import TextGenerator
from aiayn.serve.app import Limits, create_app
from aiayn.serve.continuous import ContinuousBatcher, GenerationRequest

PROMPTS = ["the cat ", "a dog ran in the park 3 .\n", "t", "the cat sat on the mat . a dog", "park 1",
           "a ", "the mat . a dog ran in", "dog"]


@pytest.fixture(scope="module")
def generator(lm_run):
    return TextGenerator.from_checkpoint(lm_run)


def alone(generator, prompt: str, n: int, temperature: float, seed: int) -> list[int]:
    ids = torch.tensor([generator.prompt_ids(prompt)])
    strategy = "greedy" if temperature == 0 else "sample"
    return generate(generator.model, ids, strategy, max_new_tokens=n, temperature=temperature or 1.0, seed=seed)[0]


def test_continuous_batching_equals_each_request_alone(generator):
    batcher = ContinuousBatcher(generator.model, max_batch=4)
    results, done = {}, threading.Event()
    jobs = []
    for i, prompt in enumerate(PROMPTS):
        def emit(event, i=i):
            if "finish_reason" in event:
                results[i] = event
                if len(results) == len(PROMPTS):
                    done.set()
        temperature = 0.0 if i % 2 else 1.3
        jobs.append(GenerationRequest(generator.prompt_ids(prompt), 8 + 7 * i, emit, temperature, seed=i))
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
        expected = alone(generator, PROMPTS[i], 8 + 7 * i, job.temperature, i)
        assert job.generated == expected, i
        assert results[i]["completion_tokens"] == len(expected)
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
    assert lm_client.post("/generate", json=seeded).json() == lm_client.post("/generate", json=seeded).json()
    assert lm_client.get("/health").json()["joined"] >= 3


def test_generate_streams_server_sent_events(lm_client):
    body = {"prompt": "the cat ", "max_new_tokens": 12, "temperature": 0, "stream": True}
    with lm_client.stream("POST", "/generate", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    tokens, final = events[:-1], events[-1]
    assert len(tokens) == final["completion_tokens"] == 12 and final["finish_reason"] == "length"
    assert "".join(e["text"] for e in tokens) == final["text"]


@pytest.mark.parametrize("body, words", [({"prompt": ""}, "empty"), ({"prompt": "a", "max_new_tokens": 65}, "limit"),
                                         ({"prompt": "a", "colour": 1}, "colour"),
                                         ({"prompt": "a", "temperature": -1}, "temperature"),
                                         ({"prompt": "a " * 150}, "characters")])
def test_generate_bad_requests(lm_client, body, words):
    response = lm_client.post("/generate", json=body)
    assert 400 <= response.status_code < 500 and words in str(response.json()["detail"])


def test_fill_mask_endpoint(mlm_run):
    filler = MaskFiller.from_checkpoint(mlm_run)
    with TestClient(create_app(filler), raise_server_exceptions=False) as client:
        masks = client.post("/fill-mask", json={"text": "the cat <mask> on the mat .", "top_k": 3}).json()["masks"]
        assert masks[0][0]["token"].strip() == "sat" and len(masks[0]) == 3
        response = client.post("/fill-mask", json={"text": "no mask here"})
        assert response.status_code == 422 and "<mask>" in response.json()["detail"]
        assert client.get("/health").json()["model"]["arch"] == "encoder-only"
