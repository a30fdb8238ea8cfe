"""What clients expect beside generation: /tokenize and /detokenize in vLLM's shape (a prompt's or a conversation's
token count against the model's context), and several end ids stopping a row on the OpenAI routes."""

import openai
import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.inference.generator import TextGenerator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> TextGenerator:
    return TextGenerator.from_checkpoint(chat_checkpoint(tmp_path_factory.mktemp("tokens") / "ckpt"))


def test_tokenize_and_detokenize_in_vllms_shape(generator):
    messages = [{"role": "user", "content": "Two dogs play."}]
    with TestClient(create_app(generator, Limits(max_chars=500))) as client:
        found = client.post("/tokenize", json={"prompt": "A man rides a horse.", "return_token_strs": True}).json()
        ids = generator.prompt_ids("A man rides a horse.")
        assert found["tokens"] == ids and found["count"] == len(ids)
        assert found["max_model_len"] == client.app.state.batcher.capacity
        assert found["token_strs"] == generator.tokenizer.pieces(ids)
        chat = client.post("/tokenize", json={"messages": messages}).json()
        assert chat["tokens"] == generator.chat_ids(messages) and chat["count"] == len(chat["tokens"])
        back = client.post("/detokenize", json={"tokens": ids}).json()
        assert back == {"prompt": generator.tokenizer.decode(ids)} and "horse" in back["prompt"]
        assert client.post("/tokenize", json={"prompt": "a", "messages": messages}).status_code == 422
        bad = client.post("/detokenize", json={"tokens": [1, 10**6]})
        assert bad.status_code == 422 and "1000000 is not an id" in bad.json()["detail"]
        long = client.post("/tokenize", json={"prompt": "a man " * 200}).json()  # over --max-chars: counted
        assert long["count"] == len(generator.tokenizer.encode("a man " * 200)) > 200


def test_any_of_several_end_ids_stops_an_openai_answer(generator, tmp_path):
    """A token of the model's (seeded, sampled) answer made an extra end id (as Llama 3 and Qwen2 list several):
    the answer stops before it, finish_reason "stop"."""
    ids = torch.tensor([generator.prompt_ids("Two dogs")])
    tokens = generate(generator.model, ids, "sample", max_new_tokens=10, temperature=1.0, seed=5)[0]
    at = next(j for j in range(1, len(tokens)) if tokens[j] not in tokens[:j])  # a token new to the answer
    folder = chat_checkpoint(tmp_path / "ckpt")
    stopping = TextGenerator.from_checkpoint(folder)
    stopping.model.config = stopping.model.config.replace(stop_ids=(tokens[at],))
    limits = Limits(max_chars=500)
    with serving(create_app(stopping, limits, name="m"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        done = client.completions.create(model="m", prompt="Two dogs", max_tokens=10, temperature=1.0, seed=5)
    assert done.choices[0].finish_reason == "stop" and done.usage.completion_tokens == at
    assert done.choices[0].text == generator.tokenizer.decode(tokens[:at])


def test_v1_starts_from_generation_json_and_a_chat_runs_to_the_end_of_its_turn(tmp_path):
    """The server's decoding (generation.json: here temperature 0) is /v1's too; a chat without max_tokens runs to
    its end or the server's limit, a completion without it stops at OpenAI's 16."""
    from aiayn.decoding.config import DecodingConfig

    folder = chat_checkpoint(tmp_path / "ckpt")
    (folder / "generation.json").write_text('{"temperature": 0.0}')
    greedy = TextGenerator.from_checkpoint(folder)
    assert greedy.decoding == DecodingConfig(temperature=0.0)
    limits = Limits(max_chars=500, max_new_tokens=40)
    messages = [{"role": "user", "content": "Two dogs play."}]
    with serving(create_app(greedy, limits, name="m"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        chat = client.chat.completions.create(model="m", messages=messages)  # no max_tokens, no temperature
        completion = client.completions.create(model="m", prompt="Two dogs")
    expected = generate(greedy.model, torch.tensor([greedy.chat_ids(messages)]), "greedy", max_new_tokens=40)[0]
    assert chat.choices[0].message.content == greedy.tokenizer.decode(expected)  # greedy, as generation.json says
    assert chat.usage.completion_tokens == len(expected)  # up to the server's limit
    assert chat.choices[0].finish_reason == ("length" if len(expected) == 40 else "stop")
    sixteen = generate(greedy.model, torch.tensor([greedy.prompt_ids("Two dogs")]), "greedy", max_new_tokens=16)[0]
    assert completion.choices[0].text == greedy.tokenizer.decode(sixteen)
    assert completion.usage.completion_tokens == len(sixteen) <= 16 and (len(sixteen) == 16
                                                                       or completion.choices[0].finish_reason == "stop")
