"""Anthropic's Messages API (``serve/messages.py``) through the official ``anthropic`` SDK, against the server of a
tiny model with Qwen2.5's real tokenizer and chat template: the same tokens as /v1/chat/completions, whole and
streamed; tools forced and free, a tool-result turn, stop sequences, count_tokens, errors in Anthropic's shape and
its ``x-api-key`` header."""

import json

import httpx
import jsonschema
import openai
import pytest

from conftest import qwen_checkpoint, run_client_snippet, serving

anthropic = pytest.importorskip("anthropic")

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]},
                                                             "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                            "required": ["city", "days"], "additionalProperties": False}}
ASK = [{"role": "user", "content": "The weather in Paris?"}]
GREEDY = {"temperature": 0}  # (the 2026 SDK no longer names it; older clients and other tools send it)


@pytest.fixture(scope="module")
def clients(qwen_served):
    url = qwen_served[0]  # .../v1: the anthropic SDK adds /v1/messages itself
    return (anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="none", max_retries=0),
            openai.OpenAI(base_url=url, api_key="none", max_retries=0))


def test_a_message_is_the_chat_answer_whole_and_streamed(clients):
    claude, gpt = clients
    message = claude.messages.create(model="qwen-tiny", max_tokens=8, messages=ASK, extra_body=GREEDY)
    chat = gpt.chat.completions.create(model="qwen-tiny", max_tokens=8, messages=ASK, extra_body=GREEDY)
    (block,) = message.content
    assert block.type == "text" and block.text == chat.choices[0].message.content
    reason = {"length": "max_tokens", "stop": "end_turn"}[chat.choices[0].finish_reason]
    assert message.stop_reason == reason and message.role == "assistant" and message.id.startswith("msg_")
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert usage.output_tokens == chat.usage.completion_tokens > 0
    with claude.messages.stream(model="qwen-tiny", max_tokens=8, messages=ASK, extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == block.text == final.content[0].text and final.stop_reason == reason
    assert final.usage.output_tokens == usage.output_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_tool_is_a_tool_use_block_whose_input_follows_the_schema(clients, stream):
    claude, _ = clients
    ask = dict(model="qwen-tiny", max_tokens=80, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"})
    if stream:
        with claude.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(**ask)
    (call,) = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and call.name == "get_weather"
    jsonschema.validate(call.input, WEATHER["input_schema"])
    named = claude.messages.create(**{**ask, "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert [b.name for b in named.content if b.type == "tool_use"] == ["get_weather"]


def test_a_tool_result_turn_is_the_chat_prompt_it_means_and_count_tokens_counts_it(clients):
    """An assistant's ``tool_use`` and the user's ``tool_result`` reach the template as the tool call and the tool
    message: count_tokens and the answer's usage equal the chat route's prompt for the same turns."""
    claude, gpt = clients
    turns = [*ASK, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 24 C"}]}]
    counted = claude.messages.count_tokens(model="qwen-tiny", messages=turns, tools=[WEATHER], system="Be brief.")
    answer = claude.messages.create(model="qwen-tiny", max_tokens=1, messages=turns, tools=[WEATHER],
                                    system="Be brief.")
    chat = gpt.chat.completions.create(model="qwen-tiny", max_tokens=1, tools=[{"type": "function", "function": {
        "name": WEATHER["name"], "description": WEATHER["description"], "parameters": WEATHER["input_schema"]}}],
        messages=[{"role": "system", "content": "Be brief."}, *ASK,
                  {"role": "assistant", "content": None, "tool_calls": [{"id": "toolu_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 2})}}]},
                  {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 24 C"}])
    usage = answer.usage
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens == chat.usage.prompt_tokens


def test_a_stop_sequence_ends_the_message_and_is_named(clients):
    claude, _ = clients
    whole = claude.messages.create(model="qwen-tiny", max_tokens=12, messages=ASK, extra_body=GREEDY).content[0].text
    stop = next(whole[i: i + 2] for i in range(len(whole) // 2, len(whole) - 1) if whole[i: i + 2].strip())
    cut = claude.messages.create(model="qwen-tiny", max_tokens=12, messages=ASK, stop_sequences=[stop],
                                 extra_body=GREEDY)
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert "".join(b.text for b in cut.content) == whole[: whole.index(stop)]


def test_errors_come_in_anthropics_shape(clients):
    claude, _ = clients
    with pytest.raises(anthropic.NotFoundError) as err:
        claude.messages.create(model="claude-9", max_tokens=4, messages=ASK)
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.0"):  # a user turn has no tool_use blocks
        claude.messages.create(model="qwen-tiny", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]}])
    with pytest.raises(anthropic.BadRequestError, match="top_a: not supported"):
        claude.messages.create(model="qwen-tiny", max_tokens=4, messages=ASK, extra_body={"top_a": 1})


def test_the_api_key_goes_in_anthropics_header_too(tmp_path):
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    generator = TextGenerator.from_checkpoint(qwen_checkpoint(tmp_path / "qwen"))
    limits = Limits()
    with serving(create_app(generator, limits, name="qwen-tiny", api_key="sk-test"), limits) as url:
        good = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        assert good.messages.create(model="qwen-tiny", max_tokens=2, messages=ASK).usage.output_tokens == 2
        body = {"model": "qwen-tiny", "max_tokens": 2, "messages": ASK}
        for headers, status in [({"x-api-key": "sk-test"}, 200), ({"x-api-key": "wrong"}, 401), ({}, 401),
                                ({"Authorization": "Bearer sk-test"}, 200)]:
            answer = httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=30)
            assert answer.status_code == status, headers
            assert status == 200 or answer.json()["type"] == "error"
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
                model="qwen-tiny", max_tokens=2, messages=ASK)


def test_a_reasoning_models_thinking_is_a_thinking_block_whole_and_streamed(tmp_path):
    """A template whose prompt opens ``<think>``: the reply's thinking part is a ``thinking`` block, as the chat
    route's ``reasoning_content``; streamed as ``thinking_delta`` events into the same block."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app
    from serve.test_reasoning import OPENED

    from conftest import chat_checkpoint

    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt", template=OPENED))
    # the server's decoding (as aiayn serve's flags set it): seeded sampling, 12 tokens whatever the model ends with
    generator.decoding = generator.decoding.replace(temperature=1.0, seed=3, min_new_tokens=12)
    limits = Limits(max_chars=4000)
    ask = dict(model="r1", max_tokens=12, messages=[{"role": "user", "content": "Why?"}])
    with serving(create_app(generator, limits, name="r1"), limits) as url:
        claude = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        whole = claude.messages.create(**ask)
        with claude.messages.stream(**ask) as stream:
            final = stream.get_final_message()
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0).chat.completions.create(
            model="r1", max_tokens=12, messages=ask["messages"])
    thought = chat.choices[0].message.model_extra["reasoning_content"]
    assert [b.type for b in whole.content] == ["thinking"] and whole.content[0].thinking == thought
    assert [b.type for b in final.content] == ["thinking"] and final.content[0].thinking == thought


def test_the_docs_snippet_runs(qwen_served):
    found = run_client_snippet("anthropic", qwen_served[0], "qwen-tiny")
    assert found["call"].name == "get_weather" and isinstance(found["call"].input["city"], str)
    assert found["message"].stop_reason == "tool_use"


def test_what_claude_code_sends_is_taken(clients, rendered_prompts):
    """The fields Claude Code 2.1 sends (captured from its print mode): a system turn inside the messages, thinking
    ``adaptive``, ``context_management``, ``output_config``, a tool with ``defer_loading`` (left out of the prompt:
    a tool search loads it), ``max_tokens`` 32,000 (above the server's limit: the end of the turn)."""
    claude, gpt = clients
    tools = [WEATHER, {"name": "Later", "description": "Loaded by a search.", "defer_loading": True,
                       "input_schema": {"type": "object", "properties": {}}}]
    with claude.messages.stream(  # streamed, as Claude Code asks (the SDK streams a request this long)
            model="qwen-tiny", max_tokens=32_000, tools=tools, system=[{"type": "text", "text": "Be brief."}],
            messages=[{"role": "system", "content": [{"type": "text", "text": "Working directory: /tmp"}]}, *ASK],
            extra_body={**GREEDY, "thinking": {"type": "adaptive", "display": "omitted"},
                        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                        "output_config": {"effort": "high"}}) as stream:
        message = stream.get_final_message()
    prompt = rendered_prompts[-1][0]
    assert "Working directory: /tmp" in prompt and "get_weather" in prompt and "Later" not in prompt
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0
    chat = gpt.chat.completions.create(model="qwen-tiny", messages=[
        {"role": "system", "content": "Be brief."}, {"role": "system", "content": "Working directory: /tmp"}, *ASK],
        tools=[{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                 "parameters": WEATHER["input_schema"]}}], extra_body=GREEDY)
    assert message.content[0].text == chat.choices[0].message.content  # as far as the limit and the context go
