"""The official ``openai`` client against ``aiayn serve`` of a tiny random model with Qwen2.5's real tokenizer and
chat template: chat and completions, ``n`` with a ``seed``, ``stop``, log-probabilities, a JSON schema, usage (tool
calls: test_tools.py; the Responses API: test_responses.py)."""

import json

import jsonschema
import openai
import pytest

from conftest import page_of_text, run_client_snippet


@pytest.fixture(scope="module")
def api(qwen_served):
    return openai.OpenAI(base_url=qwen_served[0], api_key="none", max_retries=0)


def test_chat_with_n_a_seed_logprobs_and_usage(api, qwen_served):
    generator = qwen_served[1]
    messages = [{"role": "user", "content": "Tell me a story"}]
    ask = dict(model="qwen-tiny", messages=messages, n=2, seed=7, max_tokens=5, logprobs=True, top_logprobs=2)
    first, again = api.chat.completions.create(**ask), api.chat.completions.create(**ask)
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in again.choices]  # a seed repeats
    assert first.usage.prompt_tokens == len(generator.rendered_ids(generator.chat_prompt(messages)))
    assert first.usage.completion_tokens == 10 and all(c.finish_reason == "length" for c in first.choices)
    for choice in first.choices:
        tokens = choice.logprobs.content
        assert len(tokens) == 5 and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in tokens)
        assert "".join(t.token for t in tokens) == choice.message.content


def test_a_stop_string_cuts_the_text_where_it_starts(api):
    ask = dict(model="qwen-tiny", prompt="Once upon a time", max_tokens=12, temperature=0)
    whole = api.completions.create(**ask).choices[0].text
    stop = whole[3:5]
    cut = api.completions.create(**ask, stop=[stop]).choices[0]
    assert cut.text == whole[:whole.index(stop)] and cut.finish_reason == "stop"


def test_completions_logprobs_and_a_json_schema(api):
    answer = api.completions.create(model="qwen-tiny", prompt="Once", max_tokens=4, logprobs=2, temperature=0)
    logprobs = answer.choices[0].logprobs
    assert "".join(logprobs.tokens) == answer.choices[0].text and len(logprobs.top_logprobs) == 4
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    chat = api.chat.completions.create(model="qwen-tiny", messages=[{"role": "user", "content": "Fine?"}],
                                       max_tokens=30, response_format={"type": "json_schema", "json_schema": {
                                           "name": "verdict", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(chat.choices[0].message.content), schema)


def test_the_docs_snippet_runs(qwen_served, capsys):
    found = run_client_snippet("openai", qwen_served[0], "qwen-tiny")
    assert capsys.readouterr().out == f"{found['chat'].choices[0].message.content}\n{found['response'].output_text}\n"
    generator = qwen_served[1]
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    assert found["response"].usage.input_tokens == len(generator.rendered_ids(generator.chat_prompt(system)))


def test_a_page_long_system_prompt_gets_through_at_the_default_flags(api, qwen_served):
    """The prompt is limited in tokens by the model's context, not in characters (``--max-chars`` is 1,000)."""
    generator, page = qwen_served[1], page_of_text()
    messages = [{"role": "system", "content": page}, {"role": "user", "content": "And this one?"}]
    answer = api.chat.completions.create(model="qwen-tiny", messages=messages, max_tokens=4)
    assert len(page) > 2000 and answer.usage.prompt_tokens == len(generator.rendered_ids(generator.chat_prompt(
        messages)))
    too_long = [{"role": "user", "content": page * 3}]  # over the model's 1,024 tokens: refused, naming the flag
    with pytest.raises(openai.BadRequestError, match="max-model-len") as err:
        api.chat.completions.create(model="qwen-tiny", messages=too_long, max_tokens=4)
    assert err.value.code == "context_length_exceeded"


def test_logit_bias_is_the_same_through_chat_completions_and_responses(api, qwen_served):
    """The official client's ``logit_bias`` on a real tokenizer: a token pushed by 100 is the whole reply, through
    /v1/chat/completions and /v1/responses alike (the chat field, which the Responses route takes too), and a ban
    keeps the greedy reply's first token out of it."""
    generator = qwen_served[1]
    paris = generator.tokenizer.encode(" Paris")[0]
    messages = [{"role": "user", "content": "The capital of France?"}]
    chat = api.chat.completions.create(model="qwen-tiny", messages=messages, max_tokens=3, temperature=0,
                                       logit_bias={str(paris): 100})
    responses = api.responses.create(model="qwen-tiny", input="The capital of France?", max_output_tokens=3,
                                     temperature=0, extra_body={"logit_bias": {str(paris): 100}})
    assert chat.choices[0].message.content == responses.output_text == generator.tokenizer.decode([paris] * 3)
    ask = dict(model="qwen-tiny", messages=messages, max_tokens=4, temperature=0,
               extra_body={"return_token_ids": True})
    first = api.chat.completions.create(**ask).choices[0].model_dump()["token_ids"][0]
    again = api.chat.completions.create(**ask, logit_bias={str(first): -100}).choices[0].model_dump()["token_ids"]
    assert first not in again
