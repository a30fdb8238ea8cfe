"""POST /v1/responses (OpenAI's Responses API) through the official client, on a tiny random model with Qwen2.5's
real tokenizer and chat template (the OpenAI Agents SDK's use of it: test_client_agents.py)."""

import json

import jsonschema
import openai
import pytest

from aiayn.serve.response_object import Items

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]},
                                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                          "required": ["city", "days"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def api(qwen_served):
    return openai.OpenAI(base_url=qwen_served[0], api_key="none", max_retries=0)


def test_a_response_is_the_chat_answer_of_the_same_conversation(api):
    """``instructions`` and ``input`` mean the system and user messages: greedy, the same text and token counts as
    /v1/chat/completions; cut at ``max_output_tokens``, the response is ``incomplete`` and says why."""
    answer = api.responses.create(model="qwen-tiny", instructions="Be brief.", input="Hello there",
                                  max_output_tokens=6, temperature=0)
    chat = api.chat.completions.create(model="qwen-tiny", max_tokens=6, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}])
    assert answer.output_text == chat.choices[0].message.content
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (chat.usage.prompt_tokens, 6)
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens"
    assert answer.id.startswith("resp_") and answer.store is False


def test_the_stream_is_typed_events_whose_deltas_make_the_response(api):
    ask = dict(model="qwen-tiny", input="Hello there", max_output_tokens=8, temperature=0)
    whole = api.responses.create(**ask)
    events = list(api.responses.create(**ask, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == 8


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_is_a_function_call_item_whose_arguments_follow_the_schema(api, stream):
    ask = dict(model="qwen-tiny", input="Weather in Paris for 2 days?", tools=[WEATHER], tool_choice="required",
               max_output_tokens=80)
    if stream:
        events = list(api.responses.create(**ask, stream=True))
        fragments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        answer = events[-1].response
        assert answer.output[0].arguments == fragments
        assert [e.type for e in events].index("response.output_item.added") < \
            [e.type for e in events].index("response.function_call_arguments.delta")
    else:
        answer = api.responses.create(**ask)
    (call,) = answer.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert answer.status == "completed"


def test_function_call_items_and_their_outputs_are_the_chat_turns_they_mean(api):
    """Two earlier calls side by side and their results, sent back as items, reach the template as one assistant
    turn with both tool calls and the two tool messages: the prompt is the one the chat route renders for the same
    turns (two assistant turns of a call each render longer)."""
    cities = {"call_1": "Paris", "call_2": "Tokyo"}
    calls = [{"type": "function_call", "call_id": i, "name": "get_weather",
              "arguments": f'{{"city": "{c}", "days": 2}}'} for i, c in cities.items()]
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Tokyo?"}]}, *calls,
             *({"type": "function_call_output", "call_id": i, "output": f"Sunny in {c}"} for i, c in cities.items())]
    answer = api.responses.create(model="qwen-tiny", input=items, tools=[WEATHER], max_output_tokens=1)
    tool_calls = [{"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                  for c in calls]
    results = [{"role": "tool", "tool_call_id": i, "content": f"Sunny in {c}"} for i, c in cities.items()]
    asked = {"role": "user", "content": "Weather in Paris and Tokyo?"}
    tools = [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    one_turn, two_turns = (api.chat.completions.create(model="qwen-tiny", max_tokens=1, tools=tools, messages=[
        asked, *turns, *results]).usage.prompt_tokens for turns in (
        [{"role": "assistant", "content": None, "tool_calls": tool_calls}],
        [{"role": "assistant", "content": None, "tool_calls": [c]} for c in tool_calls]))
    assert answer.usage.input_tokens == one_turn != two_turns


def test_a_json_schema_text_format_constrains_the_answer(api):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    answer = api.responses.create(model="qwen-tiny", input="Is it fine?", max_output_tokens=30,
                                  text={"format": {"type": "json_schema", "name": "verdict", "schema": schema}})
    jsonschema.validate(json.loads(answer.output_text), schema)


@pytest.mark.parametrize(("fields", "status", "named"), [
    ({"previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ({"include": ["message.output_text.logprobs"]}, 400, "include"),
    ({"background": True}, 400, "background"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, "call_id"),
    ({"model": "gpt-9"}, 404, "model"),
])
def test_what_the_server_cannot_do_is_refused_by_name(api, fields, status, named):
    with pytest.raises(openai.APIStatusError) as err:
        api.responses.create(**{"model": "qwen-tiny", "input": "Hi", "max_output_tokens": 2, **fields})
    assert err.value.status_code == status and named in err.value.message


def test_the_stream_items_open_one_at_a_time():
    """Text then two calls: each item is closed before the next opens, a call's name comes first and its
    arguments in fragments."""
    items = Items()
    events = items.text("Let me see.") + items.call(
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x":'}})
    events += items.call({"index": 0, "function": {"arguments": " 1}"}}) + items.call(
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}) + items.close()
    kinds = [k for k, _ in events]
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    opened = [i for i, k in enumerate(kinds) if k == "response.output_item.added"]
    closed = [i for i, k in enumerate(kinds) if k == "response.output_item.done"]
    assert all(c < o for c, o in zip(closed, opened[1:], strict=False))
    assert [item["type"] for item in items.output] == ["message", "function_call", "function_call"]
    assert items.output[1]["arguments"] == '{"x": 1}' and items.output[1]["name"] == "f"
