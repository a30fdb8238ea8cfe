"""Structured output: a JSON schema (or ``json_object``) constrains decoding, per row, inside the engine. The output
parses and validates on several schemas (greedy and sampled), constrained and free rows share a batch with the
free ones unchanged token for token, and a schema that cannot compile is refused naming the problem: through the
library, ``/generate`` and the official OpenAI client."""

import json
import threading

import jsonschema
import openai
import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.decoding.config import DecodingConfig
from aiayn.inference.generator import TextGenerator
from aiayn.serve.jobs import Finished
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import DecodeJob, Scheduler
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving

SCHEMAS = {
    "nested": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "address": {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo", "Lima"]},
                                                     "floor": {"type": "integer", "minimum": 0, "maximum": 9}},
                    "required": ["city", "floor"], "additionalProperties": False}},
        "required": ["name", "address"], "additionalProperties": False},
    "array": {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                                                        "minItems": 1, "maxItems": 3}},
              "required": ["tags"], "additionalProperties": False},
    "numbers": {"type": "object", "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 5},
                                                 "ok": {"type": "boolean"},
                                                 "score": {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["count", "ok", "score"], "additionalProperties": False},
    "enum": {"enum": ["yes", "no"]},
}


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> TextGenerator:
    return TextGenerator.from_checkpoint(chat_checkpoint(tmp_path_factory.mktemp("json") / "ckpt"))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_output_parses_and_follows_the_schema_greedy_and_sampled(generator, name):
    schema = json.dumps(SCHEMAS[name])
    for options in ({"temperature": 0}, {"temperature": 1.0, "seed": 3}):
        (text,) = generator.generate("Two dogs play.", 120, json_schema=schema, **options)
        jsonschema.validate(json.loads(text), SCHEMAS[name])  # raises if it does not parse or follow


def test_json_object_is_any_object_and_free_rows_are_unchanged_in_a_shared_batch(generator):
    """A constrained row and two free rows decode in one batch: the free ones equal greedy decoding alone."""
    model, prompt = generator.model, generator.prompt_ids("What is the capital of France?")
    grammar = generator.grammars.compile(json_schema='{"type": "object"}')
    done, events = threading.Event(), {}

    def job(i: int, constrained: bool) -> DecodeJob:
        def emit(event):
            if isinstance(event, Finished):
                events[i] = event
                if len(events) == 3:
                    done.set()
        cfg = DecodingConfig(strategy="greedy", max_new_tokens=40)
        return DecodeJob(prompt, cfg, emit, grammar=grammar if constrained else None)

    batcher = Scheduler(model, max_batch=4)
    batcher.start()
    try:
        batcher.submit(job(0, False), job(1, True), job(2, False))
        assert done.wait(timeout=60)
    finally:
        batcher.stop()
    alone = generate(model, torch.tensor([prompt]), "greedy", max_new_tokens=40)[0]
    assert events[0].ids == alone == events[2].ids  # free rows: token for token as without the schema
    assert isinstance(json.loads(generator.tokenizer.decode(events[1].ids)), dict)
    assert events[1].finish_reason == "stop" and batcher.largest_batch == 3


def test_a_grammar_is_compiled_once_and_a_bad_schema_is_refused_naming_the_problem(generator):
    schema = json.dumps(SCHEMAS["array"])
    assert generator.grammars.compile(json_schema=schema) is generator.grammars.compile(json_schema=schema)
    with pytest.raises(ValueError, match=r"json_schema: cannot compile it: .*nonsense"):
        generator.grammars.compile(json_schema='{"type": "nonsense"}')
    with pytest.raises(ValueError, match="json_schema: must be the text of a JSON object"):
        DecodingConfig(json_schema="{not json")
    with pytest.raises(ValueError, match="json_schema: constrained decoding is greedy or sampled, not beam"):
        generator.generate("a", 5, strategy="beam", json_schema=schema)


def test_structured_output_through_the_openai_client_and_generate(generator):
    limits = Limits(max_chars=2000)
    app = create_app(generator, limits, name="tiny-json")
    with serving(app, limits) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": "Zwei Hunde spielen."}]
        schema = SCHEMAS["nested"]
        done = client.chat.completions.create(model="tiny-json", messages=messages, temperature=0, max_tokens=120,
                                              response_format={"type": "json_schema", "json_schema": {
                                                  "name": "person", "schema": schema, "strict": True}})
        jsonschema.validate(json.loads(done.choices[0].message.content), schema)
        assert done.choices[0].finish_reason == "stop"
        anything = client.completions.create(model="tiny-json", prompt="A man", max_tokens=100, temperature=0,
                                              extra_body={"response_format": {"type": "json_object"}})
        assert isinstance(json.loads(anything.choices[0].text), dict)
        with pytest.raises(openai.BadRequestError, match=r"response_format: .*cannot compile"):
            client.chat.completions.create(model="tiny-json", messages=messages, response_format={
                "type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "nonsense"}}})
    with TestClient(create_app(generator, limits)) as native:
        answer = native.post("/generate", json={"prompt": "Two dogs", "max_new_tokens": 120, "temperature": 0,
                                                "json_schema": json.dumps(SCHEMAS["numbers"])}).json()
        jsonschema.validate(json.loads(answer["text"]), SCHEMAS["numbers"])
        bad = native.post("/generate", json={"prompt": "a", "json_schema": '{"type": "nonsense"}'})
        assert bad.status_code == 422 and "json_schema: cannot compile" in bad.json()["detail"]


def test_generate_json_schema_flag_reads_a_file(generator, tmp_path, capsys):
    from aiayn.cli import main

    folder = tmp_path / "ckpt"
    chat_checkpoint(folder)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMAS["array"]))
    assert main(["generate", "--checkpoint", str(folder), "--prompt", "Two dogs", "--temperature", "0",
                 "--max-new-tokens", "80", "--json-schema", str(tmp_path / "schema.json")]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMAS["array"])
    with pytest.raises(SystemExit) as missing:
        main(["generate", "--checkpoint", str(folder), "--prompt", "a", "--json-schema", str(tmp_path / "no.json")])
    assert missing.value.code == 2
    assert "no.json" in capsys.readouterr().err


def test_a_sentencepiece_model_aiayn_trained_follows_a_schema_too(lm_run):
    """llguidance reads a SentencePiece vocabulary from its pieces (``<0xNN>`` bytes, ``▁`` spaces)."""
    trained = TextGenerator.from_checkpoint(lm_run)
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "n": {"type": "integer", "minimum": 0,
                                                                                "maximum": 9}},
              "required": ["a", "n"], "additionalProperties": False}
    (text,) = trained.generate("the cat ", 60, temperature=0, json_schema=json.dumps(schema))
    jsonschema.validate(json.loads(text), schema)


def test_a_row_whose_grammar_allows_no_token_ends_alone(monkeypatch):
    """A grammar the vocabulary cannot continue ends its row ("stop", no token), not the batch."""
    import aiayn.decoding.greedy as greedy
    from aiayn.decoding.core import Columns
    from aiayn.model.config import ModelConfig

    class Stuck:
        stopped = False

        def take(self, token):
            raise AssertionError("a finished row takes no token")

    monkeypatch.setattr(greedy, "allowed", lambda rows, width: torch.zeros(len(rows), width, dtype=torch.bool))
    cfg = ModelConfig.preset("tiny", arch="decoder-only", vocab_size=12)
    rows = greedy.TokenRows(torch.tensor([5, 5]), greedy.argmax, cfg.eos_id, cfg.pad_id, constraints=[Stuck(), None])
    nxt, _ = rows.advance(torch.randn(2, 12), Columns(cfg))
    assert rows.reasons == ["stop", None] and nxt[0] == cfg.pad_id and rows.live.tolist() == [False, True]
