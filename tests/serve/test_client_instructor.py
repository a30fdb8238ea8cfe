"""instructor against ``aiayn serve``: a pydantic model back from ``Mode.TOOLS`` (its default: a forced function
call) and ``Mode.JSON_SCHEMA`` (``response_format``), on a tiny random model with Qwen2.5's tokenizer and chat
template: the grammar makes the answer valid, so instructor never needs a retry."""

from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from conftest import assert_whole_text_reached, page_of_text, run_client_snippet

instructor = pytest.importorskip("instructor")


class Weather(BaseModel):
    """The weather asked about."""

    city: Literal["Paris", "Tokyo"]
    days: int = Field(ge=1, le=7)
    sunny: bool


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_a_response_model_comes_back_valid_the_first_time(qwen_served, mode):
    sent = []
    client = instructor.from_openai(openai.OpenAI(base_url=qwen_served[0], api_key="none", max_retries=0),
                                    mode=getattr(instructor.Mode, mode))
    client.on("completion:kwargs", lambda *args, **kwargs: sent.append(kwargs))
    weather = client.chat.completions.create(model="qwen-tiny", response_model=Weather, max_retries=0,
                                             max_tokens=60, messages=[{"role": "user", "content": "Paris, 2 days?"}])
    assert isinstance(weather, Weather) and 1 <= weather.days <= 7
    assert len(sent) == 1  # no retry
    assert ("tool_choice" in sent[0]) == (mode == "TOOLS") and ("response_format" in sent[0]) == (mode != "TOOLS")


def test_the_docs_snippet_runs(qwen_served):
    found = run_client_snippet("instructor", qwen_served[0], "qwen-tiny")
    assert isinstance(found["weather"], found["Weather"]) and 1 <= found["weather"].days <= 7


def test_a_page_long_system_prompt_gets_through_at_the_default_flags(qwen_served, rendered_prompts):
    client = instructor.from_openai(openai.OpenAI(base_url=qwen_served[0], api_key="none", max_retries=0))
    page = page_of_text()
    weather, completion = client.chat.completions.create_with_completion(
        model="qwen-tiny", response_model=Weather, max_retries=0, max_tokens=60,
        messages=[{"role": "system", "content": page}, {"role": "user", "content": "Paris, 2 days?"}])
    assert isinstance(weather, Weather)
    assert_whole_text_reached(rendered_prompts, page, completion.usage.prompt_tokens)
