"""A reasoning model's ``<think>`` part returned apart from its answer, as vLLM returns it
(``message.reasoning_content``, ``delta.reasoning_content``), for chat templates that have one."""

import openai
import pytest

from aiayn.inference.generator import TextGenerator
from aiayn.serve.choices import Thinking
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving

# a template whose generation prompt opens the thinking part (as DeepSeek-R1's and Qwen3's thinking models do)
OPENED = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.mark.parametrize(("reply", "inside", "expected"), [
    ("<think>\nLet me think.\n</think>\n\nThe answer.", False, ("Let me think.", "The answer.")),
    ("Let me think.\n</think>\n\nThe answer.", True, ("Let me think.", "The answer.")),  # the prompt opened it
    ("The answer. <think>not here</think>", False, ("", "The answer. <think>not here</think>")),
    ("<thank you>", False, ("", "<thank you>")),
    ("<think>\nStill thinking when cut", False, ("Still thinking when cut", "")),
])
def test_the_thinking_part_is_split_off_the_same_in_any_pieces(reply, inside, expected):
    for step in (1, 3, len(reply)):
        thinking, reasoning, content = Thinking(inside), "", ""
        for at in range(0, len(reply), step):
            r, c = thinking.add(reply[at:at + step])
            reasoning, content = reasoning + r, content + c
        r, c = thinking.flush()
        assert (reasoning + r, content + c) == expected, step


def test_a_chat_answer_carries_its_reasoning_apart_whole_and_streamed(tmp_path):
    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt", template=OPENED))
    limits = Limits(max_chars=4000)
    messages = [{"role": "user", "content": "Why?"}]
    with serving(create_app(generator, limits, name="r1"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        ask = dict(model="r1", messages=messages, max_tokens=12, temperature=1, seed=3, extra_body={"ignore_eos": True})
        whole = client.chat.completions.create(**ask).choices[0].message
        deltas = [c.choices[0].delta for c in client.chat.completions.create(**ask, stream=True) if c.choices]
        ids = generator.rendered_ids(generator.chat_prompt(messages))
        plain = client.completions.create(model="r1", prompt=ids, max_tokens=12, temperature=1, seed=3,
                                          extra_body={"ignore_eos": True}).choices[0].text
    reasoning = whole.model_extra["reasoning_content"]
    assert reasoning == plain.strip() and not whole.content  # all of it was thinking: the prompt opened it
    assert "".join(d.model_extra.get("reasoning_content") or "" for d in deltas) == reasoning
    assert not any(d.content for d in deltas)


def test_the_responses_api_gives_the_reasoning_as_its_own_item(tmp_path):
    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt", template=OPENED))
    # the server's decoding (as aiayn serve's flags set it): seeded sampling, 12 tokens whatever the model ends with
    generator.decoding = generator.decoding.replace(temperature=1.0, seed=3, min_new_tokens=12)
    limits = Limits(max_chars=4000)
    with serving(create_app(generator, limits, name="r1"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        whole = client.responses.create(model="r1", input="Why?", max_output_tokens=12)
        events = list(client.responses.create(model="r1", input="Why?", max_output_tokens=12, stream=True))
    (item,) = whole.output
    assert item.type == "reasoning" and item.content[0].text and whole.output_text == ""
    streamed = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert streamed == events[-1].response.output[0].content[0].text == item.content[0].text


# Qwen3's way: the template mentions <think> but opens no thinking part; with enable_thinking false the prompt holds
# an empty one, closed, and the reply is all answer
QWEN3 = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
         "{%- if add_generation_prompt %}<|im_start|>assistant\n"
         "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


@pytest.mark.parametrize("variables", [{"enable_thinking": False}, None])
def test_a_reply_the_prompt_opened_no_thinking_for_is_all_content(tmp_path, variables):
    """A template that mentions ``<think>`` is not a prompt that opened it: with Qwen3's ``enable_thinking: false``
    (an empty thinking part closed in the prompt), or a reply that does not start with ``<think>``, the reply is the
    message's content, whole and streamed, and no ``reasoning_content`` comes."""
    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt", template=QWEN3))
    limits = Limits(max_chars=4000)
    messages = [{"role": "user", "content": "Why?"}]
    extra = {"ignore_eos": True, **({"chat_template_kwargs": variables} if variables else {})}
    with serving(create_app(generator, limits, name="q3"), limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        ask = dict(model="q3", messages=messages, max_tokens=12, temperature=1, seed=3, extra_body=extra)
        whole = client.chat.completions.create(**ask).choices[0].message
        deltas = [c.choices[0].delta for c in client.chat.completions.create(**ask, stream=True) if c.choices]
        ids = generator.rendered_ids(generator.chat_prompt(messages, variables=variables))
        plain = client.completions.create(model="q3", prompt=ids, max_tokens=12, temperature=1, seed=3,
                                          extra_body={"ignore_eos": True}).choices[0].text
    assert plain.strip() and whole.content.strip() == plain.strip()
    assert not (whole.model_extra or {}).get("reasoning_content")
    assert "".join(d.content or "" for d in deltas).strip() == plain.strip()
    assert not any(d.model_extra.get("reasoning_content") for d in deltas)
