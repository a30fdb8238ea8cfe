"""The client libraries against ``aiayn serve`` of a real instruct model, SmolLM2-135M-Instruct (imported from its
GGUF file; ``make smollm2`` fetches it), at the default flags: what its chat template allows (it renders no tools,
so a request with tools is refused by name), answered as a trained model answers."""

import asyncio
import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel

from aiayn.cli import main
from aiayn.inference.generator import TextGenerator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import SMOLLM2, page_of_text, serving

pytestmark = [pytest.mark.long, pytest.mark.real_files(SMOLLM2)]
ASK = [{"role": "user", "content": "What is the capital of France?"}]


class Capital(BaseModel):
    country: Literal["France", "Germany", "Italy"]
    capital: Literal["Paris", "Berlin", "Rome"]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smollm2") / "ckpt"
    assert main(["import", str(SMOLLM2), "--output", str(folder)]) == 0
    limits = Limits()
    with serving(create_app(TextGenerator.from_checkpoint(folder), limits, name="smollm2"), limits) as address:
        yield f"{address}/v1"


def test_the_official_client_chat_responses_and_a_json_schema(url):
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    chat = client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=30, temperature=0)
    assert "Paris" in chat.choices[0].message.content
    response = client.responses.create(model="smollm2", input=ASK[0]["content"], max_output_tokens=30, temperature=0)
    assert response.output_text == chat.choices[0].message.content
    shaped = client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=40, temperature=0,
                                            response_format={"type": "json_schema", "json_schema": {
                                                "name": "capital", "schema": Capital.model_json_schema()}})
    assert Capital(**json.loads(shaped.choices[0].message.content)).capital == "Paris"
    with pytest.raises(openai.BadRequestError, match="takes no tools"):
        client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=5, tools=[{
            "type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])


def test_a_page_long_system_prompt_and_langchain(url):
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=url, api_key="none", model="smollm2", temperature=0, max_tokens=40, max_retries=0)
    answer = llm.invoke([SystemMessage(page_of_text()), HumanMessage("What is the capital of France?")])
    assert answer.usage_metadata["input_tokens"] > 400 and answer.content
    assert "".join(c.content for c in llm.stream(ASK[0]["content"])) == llm.invoke(ASK[0]["content"]).content
    found = llm.with_structured_output(Capital, method="json_schema").invoke(ASK[0]["content"])
    assert found.capital == "Paris"


def test_instructor_and_pydantic_ai_by_json_schema(url):
    import instructor
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = instructor.from_openai(openai.OpenAI(base_url=url, api_key="none", max_retries=0),
                                    mode=instructor.Mode.JSON_SCHEMA)
    found = client.chat.completions.create(model="smollm2", response_model=Capital, max_retries=0, max_tokens=40,
                                           temperature=0, messages=ASK)
    assert found.capital == "Paris"
    model = OpenAIChatModel("smollm2", provider=OpenAIProvider(base_url=url, api_key="none"))
    agent = Agent(model, output_type=NativeOutput(Capital), retries=0)
    assert agent.run_sync(ASK[0]["content"], model_settings={"max_tokens": 40, "temperature": 0}).output.capital == \
        "Paris"


def test_the_agents_sdk_default_responses_api(url):
    from agents import Agent, ModelSettings, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)

    async def run() -> str:
        set_default_openai_client(openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0),
                                  use_for_tracing=False)
        agent = Agent(name="geo", instructions="Answer in one short sentence.", model="smollm2",
                      model_settings=ModelSettings(temperature=0, max_tokens=30))
        return (await Runner.run(agent, ASK[0]["content"])).final_output

    assert "Paris" in asyncio.run(run())


def test_the_gguf_file_itself_served():
    """``aiayn serve --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --int8``'s loader: the file run as it is (its
    Q8_0 table's blocks in the int8 output layer), its chat template and defaults from its metadata; the official
    client's chat answer is Paris. (Under ``--int4``, the file's own Q4_1 weights, aiayn answers
    "L'Étoile, la ..." as llama.cpp does on this file: docs/decoding.md.)"""
    from aiayn.serve.server import load_product

    generator, _ = load_product(str(SMOLLM2), int8=True)
    limits = Limits()
    with serving(create_app(generator, limits, name=SMOLLM2.name.removesuffix(".gguf")), limits) as address:
        client = openai.OpenAI(base_url=f"{address}/v1", api_key="none", max_retries=0)
        chat = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=ASK, max_tokens=30,
                                              temperature=0)
    assert "Paris" in chat.choices[0].message.content
