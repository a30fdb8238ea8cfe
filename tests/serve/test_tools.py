"""Tool calling through the official OpenAI client: a whole agent loop (the model calls a function, the program runs
it, the result goes back, the model answers) on a small model whose chat template takes tools; ``required`` and a
named function enforced by the grammar; calls streamed as tool-call deltas; a template without tools refused."""

import json
from pathlib import Path

import jsonschema
import openai
import pytest

from aiayn.inference.generator import TextGenerator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app
from aiayn.serve.tools import HERMES as HERMES_CALLS
from aiayn.serve.tools import template_messages

from conftest import chat_checkpoint, qwen_checkpoint, serving

# A Hermes-style template (the tool-call format of Qwen2.5 and Hermes 2 Pro), written small for the test model.
HERMES = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools>\nCall a function as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{% for call in m.tool_calls %}"
    "<tool_call>\n{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}"
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": False}}}


def get_weather(city: str, days: int) -> str:
    return f"{city}: sunny for {days} days"


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> TextGenerator:
    return TextGenerator.from_checkpoint(chat_checkpoint(tmp_path_factory.mktemp("tools") / "ckpt", template=HERMES))


@pytest.fixture(scope="module")
def server(generator):
    limits = Limits(max_chars=4000)
    with serving(create_app(generator, limits, name="tiny-tools"), limits) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)


def prompt_held(generator: TextGenerator, messages: list[dict], tools: list[dict] | None = None) -> tuple[str, int]:
    """The prompt a request of ``messages`` (and ``tools``) renders on the server, and its token count."""
    prompt = generator.chat_prompt(template_messages(messages), tools)
    return prompt, len(generator.rendered_ids(prompt))


def test_an_agent_loop_through_the_official_client(server, generator):
    messages = [{"role": "user", "content": "What is the weather in Paris this week?"}]
    first = server.chat.completions.create(model="tiny-tools", messages=messages, tools=[WEATHER, TIME],
                                           tool_choice="required", temperature=0, max_tokens=200)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in ("get_weather", "get_time")
    arguments = json.loads(call.function.arguments)  # a JSON string, following the function's schema
    jsonschema.validate(arguments, (WEATHER if call.function.name == "get_weather" else TIME)["function"]["parameters"])
    named = server.chat.completions.create(model="tiny-tools", messages=messages, tools=[WEATHER, TIME], max_tokens=200,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                           temperature=0)
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    result = get_weather(**json.loads(call.function.arguments))  # the program runs the function
    messages += [named.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": result}]
    final = server.chat.completions.create(model="tiny-tools", messages=messages, tools=[WEATHER], max_tokens=12,
                                           temperature=0, tool_choice="none")
    assert final.choices[0].message.tool_calls is None and final.choices[0].finish_reason in ("stop", "length")
    assert isinstance(final.choices[0].message.content, str)
    prompt, count = prompt_held(generator, messages)  # the tool's result reached the model's prompt
    assert f"<tool_response>\n{result}\n</tool_response>" in prompt and final.usage.prompt_tokens == count
    assert count > prompt_held(generator, messages[:-1])[1]


def test_tool_calls_stream_as_deltas_equal_to_the_whole_answer(server):
    """As OpenAI streams a call: its id and name first, then its arguments in fragments that join to the whole
    answer's."""
    request = {"model": "tiny-tools", "messages": [{"role": "user", "content": "Time in Paris?"}],
               "tools": [WEATHER, TIME], "tool_choice": "required", "temperature": 0, "max_tokens": 200}
    whole = server.chat.completions.create(**request).choices[0].message.tool_calls[0]
    deltas = [c.choices[0] for c in server.chat.completions.create(**request, stream=True) if c.choices]
    calls = [d for chunk in deltas for d in (chunk.delta.tool_calls or [])]
    assert len(calls) > 2 and {c.index for c in calls} == {0} and calls[0].id.startswith("call_")
    assert calls[0].function.name == whole.function.name and all(c.id is None for c in calls[1:])
    assert "".join(c.function.arguments or "" for c in calls) == whole.function.arguments
    assert deltas[-1].finish_reason == "tool_calls"


def test_tools_are_refused_for_a_template_without_them_and_bad_requests_are_400(tmp_path):
    folder = chat_checkpoint(tmp_path / "ckpt")  # ChatML without tools
    limits = Limits(max_chars=4000)
    with serving(create_app(TextGenerator.from_checkpoint(folder), limits, name="plain"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.BadRequestError, match="tools: this model's chat template takes no tools"):
            client.chat.completions.create(model="plain", messages=messages, tools=[WEATHER])
        with pytest.raises(openai.BadRequestError, match="tool_choice: no function named 'nope'"):
            client.chat.completions.create(model="plain", messages=messages, tools=[WEATHER],
                                           tool_choice={"type": "function", "function": {"name": "nope"}})
        with pytest.raises(openai.BadRequestError, match="tool_choice: give tools"):
            client.chat.completions.create(model="plain", messages=messages, tool_choice="required")


def test_parsing_calls_and_streaming_a_call_name_first_then_its_arguments():
    text = 'Sure.<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    content, calls = HERMES_CALLS.parse(text, {"get_time"})
    assert content == "Sure." and calls[0]["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'}
    assert HERMES_CALLS.parse(text, {"other"}) == (text, [])  # a function not offered stays text
    for step in (1, 5, len(text)):  # character by character, in pieces, whole
        stream, sent, deltas = HERMES_CALLS.stream({"get_time"}), "", []
        for at in range(0, len(text + " done"), step):
            text_now, found = stream.add((text + " done")[at:at + step])
            sent, deltas = sent + text_now, deltas + found
        assert sent == "Sure. done" and stream.flush() == ("", [])
        assert deltas[0]["function"] == {"name": "get_time", "arguments": ""} and deltas[0]["index"] == 0
        fragments = [d["function"]["arguments"] for d in deltas[1:]]
        assert "".join(fragments) == '{"zone": "UTC"}' == stream.calls[0]["function"]["arguments"]
        assert len(fragments) == (1 if step == len(text) else 4 if step == 5 else 14)  # as written, in pieces


def test_a_call_written_otherwise_goes_out_whole_and_a_call_cut_short_says_so():
    swapped = '<tool_call>{"arguments": {"zone": "UTC"}, "name": "get_time"}</tool_call>'
    stream = HERMES_CALLS.stream({"get_time"})
    deltas = [d for c in swapped for d in stream.add(c)[1]]
    (call,) = deltas
    assert call["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'} and not stream.cut
    stream = HERMES_CALLS.stream({"get_time"})
    stream.add('<tool_call>{"name": "get_time", "arguments": {"zone": "U')
    assert stream.flush() == ("", []) and stream.cut and stream.calls[0]["function"]["arguments"] == '{"zone": "U'


@pytest.mark.parametrize(("reply", "names"), [
    ('{"name": "get_time", "arguments": {"zone": "UTC"}}', ["get_time"]),
    ('```json\n{"name": "get_time", "parameters": {"zone": "CET"}}\n```', ["get_time"]),  # fenced; Llama 3's key
    ('[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]',
     ["get_time", "get_weather"]),  # parallel calls
    ('{"name": "get_time", "arguments": {"zone": "UTC"}} and more', []),  # text beside it: not a call
    ('{"name": "send_mail", "arguments": {}}', []),  # a function not offered
    ('{"ok": true}', []),  # a JSON answer, no call
    ("It is sunny.", []),
])
def test_a_bare_or_fenced_json_call_is_a_call_and_anything_else_stays_text(reply, names):
    """``tool_choice: auto``: a model that writes its call as the whole reply's JSON (bare, or in a Markdown fence)
    made a call; streamed in pieces, the reply is held until the end decides."""
    stream, sent, deltas = HERMES_CALLS.stream({"get_time", "get_weather"}), "", []
    for at in range(0, len(reply), 7):
        text_now, found = stream.add(reply[at:at + 7])
        sent, deltas = sent + text_now, deltas + found
    rest, found = stream.flush()
    sent, deltas = sent + rest, deltas + found
    assert [d["function"]["name"] for d in deltas] == names
    assert sent == ("" if names else reply) and [d["index"] for d in deltas] == list(range(len(names)))


def test_the_agent_loop_of_the_docs_runs(server, generator, capsys):
    """docs/serving.md's agent loop, run as it is written against this server (its address and model name): the
    function's result goes into the last request's prompt, and what it prints is that request's answer."""

    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    code = doc.split("<!-- agent-loop -->\n```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("http://127.0.0.1:8000/v1", str(server.base_url)).replace('"MODEL"', '"tiny-tools"')
    loop = {}
    exec(compile(code, "docs/serving.md", "exec"), loop)
    final, messages, result = loop["final"], loop["messages"], loop["result"]
    assert result == get_weather(**json.loads(loop["call"].function.arguments))
    prompt, count = prompt_held(generator, messages, loop["tools"])
    assert f"<tool_response>\n{result}\n</tool_response>" in prompt and final.usage.prompt_tokens == count
    answer = final.choices[0].message
    assert capsys.readouterr().out == f"{answer.content}\n"  # the final answer was printed
    assert isinstance(answer.content, str) or answer.tool_calls  # text, or (as the docs say) another call


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_on_a_vocabulary_whose_markers_are_added_tokens(tmp_path, choice):
    """Qwen2.5's ``<tool_call>`` is one added token: the grammar asks for that token, so a forced call comes out as a
    call whose arguments follow the schema, ``finish_reason`` ``tool_calls``; never an empty ``length`` answer."""
    generator = TextGenerator.from_checkpoint(qwen_checkpoint(tmp_path / "qwen"))
    assert generator.tokenizer.token_id("<tool_call>") is not None
    limits = Limits(max_chars=4000)
    with serving(create_app(generator, limits, name="qwen-tiny"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        answer = client.chat.completions.create(
            model="qwen-tiny", messages=[{"role": "user", "content": "The weather in Paris for 3 days?"}],
            tools=[WEATHER, TIME], tool_choice=choice, max_tokens=80)
    reply = answer.choices[0]
    assert reply.finish_reason == "tool_calls" and answer.usage.completion_tokens > 0
    (call,) = reply.message.tool_calls
    wanted = WEATHER if isinstance(choice, dict) or call.function.name == "get_weather" else TIME
    assert call.function.name == wanted["function"]["name"]
    jsonschema.validate(json.loads(call.function.arguments), wanted["function"]["parameters"])


def test_tools_with_a_json_answer_let_auto_call_or_answer_and_a_forced_call_refuse_it(tmp_path, generator, server):
    """``tool_choice: auto`` with ``response_format``: the grammar takes either a call (its arguments by the
    schema) or the JSON answer, nothing else; a forced call with a ``response_format`` is refused by name."""
    from aiayn.serve.choices import Calls

    answer = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    qwen = TextGenerator.from_checkpoint(qwen_checkpoint(tmp_path / "qwen"))
    grammar = qwen.grammars.compile(grammar=Calls([WEATHER], "auto", qwen.tokenizer).grammar(answer))
    tok = qwen.tokenizer
    end = tok.token_id("<|im_end|>")
    for text, fits in [('{"ok": true}', True), ('<tool_call>\n{"name": "get_weather", "arguments": {"city": '
                                                 '"Paris", "days": 2}}\n</tool_call>', True),
                       ("Sunny.", False), ('{"ok": "yes"}', False)]:
        row, ids = grammar.row(), tok.encode(text)
        try:
            for token in [*ids, end]:
                row.take(token)
            taken = row.stopped
        except RuntimeError:
            taken = False
        assert taken == fits, text
    with pytest.raises(openai.BadRequestError, match="response_format"):
        server.chat.completions.create(model="tiny-tools", messages=[{"role": "user", "content": "Paris?"}],
                                       tools=[WEATHER], tool_choice="required", max_tokens=20,
                                       response_format={"type": "json_object"})


# Llama 3.1's JSON tool calls and Mistral's [TOOL_CALLS] list, as their templates teach them (written small)
LLAMA3 = ('{%- if tools %}<|im_start|>system\nRespond with a JSON for a function call: {"name": function name, '
          '"parameters": dictionary of argument name and its value}.\n{% for t in tools %}{{ t | tojson }}\n'
          '{% endfor %}<|im_end|>\n{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}'
          '<|im_end|>\n{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}')
MISTRAL = LLAMA3.replace('Respond with a JSON for a function call: {"name": function name, "parameters": '
                         'dictionary of argument name and its value}.', "[AVAILABLE_TOOLS] Call as [TOOL_CALLS][...]")


@pytest.mark.parametrize(("template", "written", "opens"), [
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Tokyo", "days": 3}}', '{"name":"get_weather","param'),
    (MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 3}}]', "[TOOL_CALLS]"),
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 3}}\n</tool_call>',
     "<tool_call>")])
def test_each_call_format_is_forced_and_read_back_as_its_template_teaches(tmp_path, template, written, opens):
    """The format is chosen from the template's text: a forced call is written in it (the grammar takes that
    format's text and not another's; the served tokens open as that format does) and read back as OpenAI's call,
    whole and streamed."""
    from aiayn.serve.choices import Calls

    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt", template=template))
    calls = Calls([WEATHER], "required", generator.tokenizer, generator.template)
    grammar, end = generator.grammars.compile(grammar=calls.grammar()), generator.model.config.eos_id
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 3}}\n</tool_call>'
    for text in {written, hermes}:
        row = grammar.row()
        try:
            for token in [*generator.tokenizer.encode(text, add_special_tokens=False), end]:
                row.take(token)
            taken = row.stopped
        except RuntimeError:
            taken = False
        assert taken == (text == written), (calls.parser.name, text)
    stream = calls.parser.stream(calls.names)
    pieces = [stream.add(written[at:at + 4]) for at in range(0, len(written), 4)] + [stream.flush()]
    assert "".join(text for text, _ in pieces) == "" and stream.calls[0]["function"]["name"] == "get_weather"
    assert json.loads(stream.calls[0]["function"]["arguments"]) == {"city": "Tokyo", "days": 3}
    limits = Limits(max_chars=4000)
    with serving(create_app(generator, limits, name="fmt"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        ask = dict(model="fmt", messages=[{"role": "user", "content": "Tokyo?"}], tools=[WEATHER],
                   tool_choice="required", max_tokens=150, temperature=0)
        whole = client.chat.completions.create(**ask, logprobs=True).choices[0]
        streamed = [d for c in client.chat.completions.create(**ask, stream=True) if c.choices
                    for d in c.choices[0].delta.tool_calls or []]
    served = "".join(t.token for t in whole.logprobs.content)  # the tokens the model was made to write
    assert "".join(served.split()).startswith(opens), served
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    jsonschema.validate(json.loads(whole.message.tool_calls[0].function.arguments), WEATHER["function"]["parameters"])
    assert "".join(d.function.arguments or "" for d in streamed) == whole.message.tool_calls[0].function.arguments
