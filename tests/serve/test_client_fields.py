"""Fields the clients and load tools send beyond OpenAI's own, as vLLM names them: ``ignore_eos`` (decode to
``max_tokens`` whatever the model would end with) and ``chat_template_kwargs`` (more variables of the chat template,
as Qwen3's ``enable_thinking``)."""

import openai
import pytest
import torch

from aiayn.inference.generator import TextGenerator
from aiayn.inference.load import load_checkpoint
from aiayn.io.checkpoint import write_checkpoint
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving

# a template that says whether thinking is on, as Qwen3's does with its enable_thinking variable
THINKING = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{%- if add_generation_prompt %}<|im_start|>assistant\n"
            "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A chat model whose every next token is its end token (its output row for ``<|im_end|>`` made large)."""
    folder = chat_checkpoint(tmp_path_factory.mktemp("fields") / "ckpt", template=THINKING)
    model, tokenizers = load_checkpoint(folder)
    with torch.no_grad():
        model.embed.tokens.weight[model.config.eos_id] *= 50.0  # the tied output: the end token always wins
    write_checkpoint(folder, model, tokenizers, overwrite=True)
    generator = TextGenerator.from_checkpoint(folder)
    limits = Limits(max_chars=4000)
    with serving(create_app(generator, limits, name="ends"), limits) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0), generator


def test_ignore_eos_decodes_to_max_tokens(client):
    api, _ = client
    ask = dict(model="ends", messages=[{"role": "user", "content": "Hi"}], max_tokens=12, temperature=0)
    ended = api.chat.completions.create(**ask)
    assert ended.choices[0].finish_reason == "stop" and ended.usage.completion_tokens <= 1
    full = api.chat.completions.create(**ask, extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 12


def test_chat_template_kwargs_reach_the_template(client):
    api, generator = client
    messages = [{"role": "user", "content": "Hi"}]
    ask = dict(model="ends", messages=messages, max_tokens=1)
    plain = api.chat.completions.create(**ask).usage.prompt_tokens
    off = api.chat.completions.create(**ask, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    expected = len(generator.rendered_ids(generator.chat_prompt(messages, variables={"enable_thinking": False})))
    assert off.usage.prompt_tokens == expected > plain  # the empty thinking block the template adds
    with pytest.raises(openai.BadRequestError, match="messages"):
        api.chat.completions.create(**ask, extra_body={"chat_template_kwargs": {"messages": "x"}})


def test_usage_reports_the_prompt_tokens_the_prefix_cache_served(client):
    """``usage.prompt_tokens_details.cached_tokens``, as OpenAI reports prompt caching: the first time only the
    template's opening that earlier requests shared (less than a block), then the whole blocks of the prompt the
    prefix cache held."""
    api, _ = client
    text = "Translate to English: Ein Mann fährt ein Pferd. Zwei Hunde spielen."
    ask = dict(model="ends", max_tokens=1, messages=[{"role": "user", "content": text}])
    first, again = (api.chat.completions.create(**ask).usage for _ in range(2))
    opening = first.prompt_tokens_details.cached_tokens
    assert opening < 16
    cached = again.prompt_tokens_details.cached_tokens
    assert 16 <= cached < again.prompt_tokens and cached == again.prompt_tokens // 16 * 16


def test_streamed_usage_at_the_end_and_in_every_chunk(client):
    """``stream_options``: ``include_usage`` adds a last chunk with no choices and the usage; vLLM's
    ``continuous_usage_stats`` puts the usage so far in every chunk, its completion tokens counting up."""
    api, _ = client
    chunks = list(api.chat.completions.create(
        model="ends", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True,
        extra_body={"ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    counts = [c.usage.completion_tokens for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == 5 and all(c.usage is not None for c in chunks)
