"""langchain-openai's ChatOpenAI against ``aiayn serve``: ``invoke``, ``stream``, ``bind_tools`` with a forced tool and
``with_structured_output`` in both methods (a function call, a JSON schema), on a tiny random model with Qwen2.5's
tokenizer and chat template (a forced call or a schema is decided by the grammar, not the weights)."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from conftest import page_of_text, run_client_snippet

langchain_openai = pytest.importorskip("langchain_openai")


class Weather(BaseModel):
    """The weather asked about."""

    city: Literal["Paris", "Tokyo"]
    days: int = Field(ge=1, le=7)


@pytest.fixture(scope="module")
def llm(qwen_served):
    return langchain_openai.ChatOpenAI(base_url=qwen_served[0], api_key="none", model="qwen-tiny", temperature=0,
                                       max_tokens=60, max_retries=0)


def test_invoke_and_stream_give_the_same_answer(llm, qwen_served):
    generator = qwen_served[1]
    answer = llm.invoke("Hello there")
    streamed = "".join(chunk.content for chunk in llm.stream("Hello there"))
    assert answer.content and streamed == answer.content
    prompt = generator.rendered_ids(generator.chat_prompt([{"role": "user", "content": "Hello there"}]))
    assert answer.usage_metadata["input_tokens"] == len(prompt)


def test_bind_tools_with_a_forced_tool_gives_a_call_whose_arguments_follow_the_schema(llm):
    answer = llm.bind_tools([Weather], tool_choice="Weather").invoke("Weather in Paris for 2 days?")
    assert answer.response_metadata["finish_reason"] == "tool_calls"
    (call,) = answer.tool_calls
    assert call["name"] == "Weather" and Weather(**call["args"]).city in ("Paris", "Tokyo")


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_structured_output_in_both_methods_is_the_model(llm, method):
    weather = llm.with_structured_output(Weather, method=method).invoke("Weather in Tokyo for 3 days?")
    assert isinstance(weather, Weather) and 1 <= weather.days <= 7


def test_the_docs_snippet_runs(qwen_served):
    found = run_client_snippet("langchain", qwen_served[0], "qwen-tiny")
    assert isinstance(found["weather"], found["Weather"]) and found["Weather"](**found["call"]["args"])


def test_a_page_long_system_prompt_gets_through_at_the_default_flags(llm):
    from langchain_core.messages import HumanMessage, SystemMessage

    answer = llm.invoke([SystemMessage(page_of_text()), HumanMessage("And this one?")])
    assert answer.usage_metadata["input_tokens"] > 400 and answer.content
