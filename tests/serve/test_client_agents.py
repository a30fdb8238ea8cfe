"""The OpenAI Agents SDK against ``aiayn serve``, with its default settings (a model named by a string: the
Responses API, streamed) and with chat completions: an agent loop with a function tool, on a tiny random model with
Qwen2.5's tokenizer and chat template."""

import asyncio
from typing import Annotated

import openai
import pytest
from pydantic import Field

from conftest import assert_whole_text_reached, page_of_text, run_client_snippet

agents = pytest.importorskip("agents")


def test_the_agents_sdk_runs_an_agent_loop_with_a_function_tool(qwen_served):
    """The OpenAI Agents SDK with its defaults (the Responses API, streamed) and with chat completions: the model
    calls the tool (forced), the SDK runs it, and the tool's answer is the agent's final output."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    asked = []

    @function_tool
    def get_weather(city: Annotated[str, Field(max_length=12)]) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"Sunny in {city}"

    async def run(chat: bool) -> str:
        client = openai.AsyncOpenAI(base_url=qwen_served[0], api_key="none", max_retries=0)
        set_default_openai_client(client, use_for_tracing=False)  # the model named by a string: Responses API
        model = OpenAIChatCompletionsModel(model="qwen-tiny", openai_client=client) if chat else "qwen-tiny"
        agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model,
                      tool_use_behavior="stop_on_first_tool",
                      model_settings=ModelSettings(tool_choice="required", max_tokens=60))
        return (await Runner.run(agent, "Weather in Paris?")).final_output

    for chat in (False, True):
        final = asyncio.run(run(chat))
        assert final == f"Sunny in {asked[-1]}"
    assert len(asked) == 2


def test_the_docs_snippet_runs(qwen_served):
    found = run_client_snippet("agents", qwen_served[0], "qwen-tiny")
    assert found["result"].final_output in ("Sunny in Paris", "Sunny in Tokyo")


def test_a_page_long_system_prompt_gets_through_at_the_default_flags(qwen_served, rendered_prompts):
    from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: Annotated[str, Field(max_length=12)]) -> str:
        """The weather in a city."""
        return "Sunny"

    page = page_of_text()

    async def run():
        set_default_openai_client(openai.AsyncOpenAI(base_url=qwen_served[0], api_key="none", max_retries=0),
                                  use_for_tracing=False)
        agent = Agent(name="weather", instructions=page, tools=[get_weather], model="qwen-tiny",
                      tool_use_behavior="stop_on_first_tool",
                      model_settings=ModelSettings(tool_choice="required", max_tokens=60))
        return await Runner.run(agent, "Weather in Paris?")

    result = asyncio.run(run())
    (response,) = result.raw_responses  # the Responses API's one answer: the call
    assert result.final_output == "Sunny"
    assert_whole_text_reached(rendered_prompts, page, response.usage.input_tokens)
