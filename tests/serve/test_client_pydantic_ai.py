"""pydantic-ai against ``aiayn serve``: an agent whose output is a pydantic model, by tool output (its default: the
model must call the output tool) and by native output (``response_format`` with the JSON schema), on a tiny random
model with Qwen2.5's tokenizer and chat template."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from conftest import assert_whole_text_reached, page_of_text, run_client_snippet

pydantic_ai = pytest.importorskip("pydantic_ai")


class Weather(BaseModel):
    """The weather asked about."""

    city: Literal["Paris", "Tokyo"]
    days: int = Field(ge=1, le=7)


@pytest.mark.parametrize("native", [False, True])
def test_an_agent_returns_its_output_type(qwen_served, native):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("qwen-tiny", provider=OpenAIProvider(base_url=qwen_served[0], api_key="none"))
    output = pydantic_ai.NativeOutput(Weather) if native else Weather
    agent = pydantic_ai.Agent(model, output_type=output, retries=0)
    result = agent.run_sync("Weather in Paris for 2 days?", model_settings={"max_tokens": 60})
    assert isinstance(result.output, Weather) and 1 <= result.output.days <= 7
    last = result.all_messages()[-1 if native else -2]  # tool output: the call, then its (output) tool return
    assert any(part.part_kind == ("text" if native else "tool-call") for part in last.parts)


def test_the_docs_snippet_runs(qwen_served):
    found = run_client_snippet("pydantic-ai", qwen_served[0], "qwen-tiny")
    assert isinstance(found["result"].output, found["Weather"])


def test_a_page_long_system_prompt_gets_through_at_the_default_flags(qwen_served, rendered_prompts):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("qwen-tiny", provider=OpenAIProvider(base_url=qwen_served[0], api_key="none"))
    page = page_of_text()
    agent = pydantic_ai.Agent(model, output_type=Weather, system_prompt=page, retries=0)
    result = agent.run_sync("Weather in Paris for 2 days?", model_settings={"max_tokens": 60})
    assert isinstance(result.output, Weather) and result.usage.requests == 1
    assert_whole_text_reached(rendered_prompts, page, result.usage.input_tokens)
