"""Many LoRA adapters behind one server: rows of three adapters (different ranks and layers) and of the base model
decode in one batch, each row's tokens equal to its adapter run alone (greedy, token for token); each adapter is a
model of /v1/models, picked by a request's ``model`` (the native /generate by ``adapter``)."""

import threading

import openai
import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.decoding.config import DecodingConfig
from aiayn.inference.generator import TextGenerator
from aiayn.inference.load import load_checkpoint
from aiayn.interop.peft import load_adapter, read_adapter, save_adapter
from aiayn.model.lora import apply_lora, lora_layers
from aiayn.model.multi_lora import attach_adapters
from aiayn.serve.jobs import Finished
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import DecodeJob, Scheduler
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving

ADAPTERS = {"fr": ("q,v", 4, 1), "de": ("q,k,v,o", 8, 2), "es": ("ffn", 2, 3)}  # targets, rank, seed
PROMPTS = ["Two dogs play.", "A man rides a horse.", "What is the capital"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The base checkpoint and three adapter folders (random updates: each changes the model's output)."""
    root = tmp_path_factory.mktemp("loras")
    base = chat_checkpoint(root / "base")
    folders = {}
    for name, (targets, rank, seed) in ADAPTERS.items():
        model, _ = load_checkpoint(base)
        torch.manual_seed(seed)
        apply_lora(model, rank, 2.0 * rank, targets)
        for layer in lora_layers(model).values():
            torch.nn.init.normal_(layer.lora_B.weight, std=0.5)
        folders[name] = root / name
        folders[name].mkdir()
        save_adapter(model, folders[name], str(base))
    return base, folders


def alone(base, folder, prompt: str) -> list[int]:
    """Greedy tokens of the base with one adapter on it (``--adapter``'s path), or of the base alone."""
    model, tokenizers = load_checkpoint(base, prepare=None if folder is None else lambda m: load_adapter(m, folder))
    ids = torch.tensor([TextGenerator(model, tokenizers).prompt_ids(prompt)])
    return generate(model.eval(), ids, "greedy", max_new_tokens=12)[0]


def test_rows_of_every_adapter_and_the_base_share_a_batch_and_equal_each_alone(served):
    base, folders = served
    model, tokenizers = load_checkpoint(base)
    rows = attach_adapters(model, {name: read_adapter(model, folder) for name, folder in folders.items()})
    generator = TextGenerator(model, tokenizers)
    jobs, finished = [], threading.Semaphore(0)
    for prompt in PROMPTS:
        for adapter in (None, *folders):
            job = DecodeJob(generator.prompt_ids(prompt), DecodingConfig(strategy="greedy", max_new_tokens=12),
                            lambda e: isinstance(e, Finished) and finished.release(),
                            adapter=0 if adapter is None else rows.number(adapter))
            jobs.append((prompt, adapter, job))
    batcher = Scheduler(generator.model, max_batch=16, capacity=64)
    batcher.start()
    try:
        batcher.submit(*(job for _, _, job in jobs))
        assert all(finished.acquire(timeout=60) for _ in jobs)
    finally:
        batcher.stop()
    assert batcher.largest_batch >= 4  # adapters and the base decoded together
    outputs = {}
    for prompt, adapter, job in jobs:
        assert job.generated == alone(base, folders.get(adapter), prompt), (prompt, adapter)
        outputs.setdefault(prompt, set()).add(tuple(job.generated))
    assert all(len(found) > 1 for found in outputs.values())  # the adapters change what the model says


def test_each_adapter_is_a_model_on_v1_and_an_adapter_field_on_generate(served):
    base, folders = served
    model, tokenizers = load_checkpoint(base)
    attach_adapters(model, {name: read_adapter(model, folder) for name, folder in folders.items()})
    limits = Limits(max_chars=2000)
    app = create_app(TextGenerator(model, tokenizers), limits, name="base")
    with serving(app, limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        listed = {m.id: m for m in client.models.list().data}
        assert set(listed) == {"base", *folders} and listed["de"].model_extra["parent"] == "base"
        assert all(m.model_extra["max_model_len"] == app.state.batcher.capacity for m in listed.values())
        for name in ("base", "de"):
            done = client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=12, temperature=0)
            expected = alone(base, folders.get(name), PROMPTS[0])
            assert done.usage.completion_tokens == len(expected) and done.model == name
            assert done.choices[0].text == tokenizers.src.decode(expected).rstrip("\ufffd")  # whole characters
        with pytest.raises(openai.NotFoundError, match="'it' does not exist"):
            client.completions.create(model="it", prompt="a", max_tokens=2)
    with TestClient(create_app(TextGenerator(model, tokenizers), limits)) as native:
        answer = native.post("/generate", json={"prompt": PROMPTS[1], "max_new_tokens": 12, "temperature": 0,
                                                "adapter": "fr"}).json()
        assert answer["text"] == tokenizers.src.decode(alone(base, folders["fr"], PROMPTS[1]))
        unknown = native.post("/generate", json={"prompt": "a", "adapter": "it"})
        assert unknown.status_code == 422 and "no adapter named 'it'" in unknown.json()["detail"]


def test_lora_flags_are_checked_before_anything_loads(served, capsys):
    from aiayn.cli import main

    base, _ = served
    assert main(["serve", "--checkpoint", str(base), "--lora", "fr"]) == 2
    assert "--lora fr: write NAME=ADAPTER_FOLDER" in capsys.readouterr().err


def test_adapter_rows_skip_the_prompt_cache_and_translation_models_are_refused(served, model):
    from aiayn.decoding.prefix import PromptCache
    from aiayn.serve.server import _attach_loras

    base, folders = served
    lm, tokenizers = load_checkpoint(base)
    rows = attach_adapters(lm, {"fr": read_adapter(lm, folders["fr"])})
    store = PromptCache(lm, block_size=4)
    prompt = TextGenerator(lm, tokenizers).prompt_ids(PROMPTS[0] * 2)
    finished = threading.Semaphore(0)
    batcher = Scheduler(lm, max_batch=4, capacity=64, prefix_cache=store)
    batcher.start()
    try:
        for adapter in (rows.number("fr"), 0):
            batcher.submit(DecodeJob(prompt, DecodingConfig(strategy="greedy", max_new_tokens=3),
                                     lambda e: isinstance(e, Finished) and finished.release(), adapter=adapter))
            assert finished.acquire(timeout=60)
    finally:
        batcher.stop()
    assert store.misses == 1 and store.hits == 0  # the adapter's row neither read nor stored the base's blocks
    with pytest.raises(ValueError, match="--lora: several adapters in one batch are served for language models"):
        _attach_loras(model, {"fr": str(folders["fr"])})
