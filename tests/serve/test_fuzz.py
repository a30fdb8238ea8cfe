"""The HTTP API fuzzed from its own schema (Schemathesis, every check): a live server of each kind (translator;
language model with the OpenAI routes and an API key; encoder) answers every generated request, valid and
invalid, with a status and a body its /openapi.json declares: no 5xx, no undeclared status or shape, a valid
request accepted and an invalid one refused; and it is alive afterwards. Bounded: a few hundred requests."""

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from aiayn.inference.embed import Embedder, Pooling
from aiayn.inference.fill_mask import MaskFiller
from aiayn.inference.generator import TextGenerator
from aiayn.inference.load import load_checkpoint
from aiayn.inference.translator import Translator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import chat_checkpoint, serving

EXAMPLES = 12  # per operation: 100-150 requests a server
# (and logit_bias: its token ids are the model's vocabulary's, its strategy the route's; tested elsewhere)
LANGUAGES = ("grammar", "json_schema", "response_format", "tools", "tool_choice", "logit_bias")
# /v1's 400s for what a schema cannot state: n times the prompts over the server's choices, texts over its limits,
# a tool call's arguments that are not JSON text (or a conversation its chat template refuses), a prompt longer than
# the context in tokens, echo or max_tokens 0 with stream (token ids past the vocabulary are stated: each id's maximum)
UNSTATED = ("n", "input", "messages", "prompt", "echo", "max_tokens")


def unstated(response) -> bool:
    """A refusal the schema cannot state: 413 (a limit counted in tokens: the schema bounds characters, and the
    size is checked before the fields), a 422 for a field beside a strategy that does not take it (one field's
    meaning depends on another's), or one of /v1's 400s above. Never a 5xx."""
    if response.status_code == 413:
        return True
    if response.status_code == 422 and "greedy or sampled" in str(response.json().get("detail")):
        return True  # a field only greedy and sampled decoding take (penalties, a bias), beside a beam strategy
    error = response.json().get("error") if response.status_code == 400 else None
    if not isinstance(error, dict):
        return False
    return (error.get("param") or error.get("message", "").split(":")[0]) in UNSTATED  # OpenAI's, Anthropic's
LIMITS = Limits(max_new_tokens=16, max_attention_tokens=32, read_timeout_s=2.0)


def fuzz(url: str, headers: dict) -> tuple[list[str], dict[str, int]]:
    """Every operation of the server's schema, ``EXAMPLES`` generated valid requests and as many invalid ones each;
    the failures found, and per POST route how many valid requests it accepted (2xx)."""
    spec = httpx.get(url + "/openapi.json", headers=headers).json()
    failures, accepted = [], {}
    for operation in (result.ok() for result in schemathesis.openapi.from_dict(spec).get_all_operations()):
        route = f"{operation.method.upper()} {operation.path}"
        if route.startswith("POST"):
            accepted[route] = 0
        for mode in schemathesis.GenerationMode:
            try:
                check(operation, mode, url, headers, accepted)
            except Exception as err:  # this operation's failures, reported together at the end
                if any(words in str(err) for words in ("Cannot generate test data", "Unable to satisfy")):
                    continue  # no request of this kind exists (a GET has nothing to break); counted below
                failures.append(f"{route} ({mode.value}): {str(err)[:600]}")
    return failures, accepted


def check(operation, mode, url: str, headers: dict, accepted: dict[str, int]) -> None:
    route = f"{operation.method.upper()} {operation.path}"

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,  # the same cases every run
              suppress_health_check=list(HealthCheck))
    def call(case):
        if mode == schemathesis.GenerationMode.POSITIVE and isinstance(case.body, dict):  # their languages:
            for field in LANGUAGES:  # a grammar's, a JSON schema's or a function's text, tested elsewhere
                case.body.pop(field, None)
        response = case.call(base_url=url, headers=headers, timeout=30)
        excluded = [positive_data_acceptance, negative_data_rejection] if unstated(response) else []
        case.validate_response(response, headers=headers, excluded_checks=excluded)
        if mode == schemathesis.GenerationMode.POSITIVE and response.status_code < 300 and route in accepted:
            accepted[route] += 1

    call()


@pytest.mark.parametrize("kind", ["translator", "language model", "plain language model", "encoder"])
def test_every_route_answers_what_its_schema_declares(kind, trained_run, mlm_run, lm_run, tmp_path):
    headers = {}
    if kind == "plain language model":  # no chat template: the chat routes are not offered
        app = create_app(TextGenerator.from_checkpoint(lm_run), LIMITS)
    elif kind == "translator":
        app = create_app(Translator.from_checkpoint(trained_run, beam_size=2), LIMITS)
    elif kind == "language model":
        key = "fuzz-key"
        headers = {"Authorization": f"Bearer {key}"}
        app = create_app(TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "lm")), LIMITS, api_key=key)
    else:
        model, tokenizers = load_checkpoint(mlm_run)
        app = create_app(MaskFiller(model, tokenizers), LIMITS, embedder=Embedder(model, tokenizers, Pooling()))
    with serving(app, LIMITS) as url:
        failures, accepted = fuzz(url, headers)
        assert httpx.get(url + "/health").json()["status"] == "ok"  # alive after it all
    assert not failures, "\n\n".join(failures)
    assert len(accepted) >= 3 and all(accepted.values()), json.dumps(accepted)  # each route took a valid request


def test_the_schema_states_the_routes_and_the_bounds_the_server_keeps(lm_run, tmp_path):
    """A model without a chat template offers no chat route in its schema (each answers a 400 that says why); a
    prompt's token ids are bounded by the vocabulary; a boolean is a JSON boolean (``"echo": 1`` was taken)."""
    chat = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "lm"))
    for generator in (TextGenerator.from_checkpoint(lm_run), chat):
        with serving(create_app(generator, LIMITS, name="m"), LIMITS) as url:
            schema = httpx.get(url + "/openapi.json").json()
            routes = {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"}
            assert (routes <= set(schema["paths"])) == (generator.chat_template is not None)
            prompt = schema["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"][
                "schema"]["properties"]["prompt"]
            assert json.dumps(prompt).count(f'"maximum": {len(generator.tokenizer) - 1}') == 2  # ids, lists of ids
            past = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": [len(generator.tokenizer)]})
            as_int = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "a", "echo": 1})
            assert past.status_code == as_int.status_code == 400 and "echo" in as_int.json()["error"]["message"]
            if generator.chat_template is None:
                refused = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": [
                    {"role": "user", "content": "hi"}]})
                assert refused.status_code == 400 and "chat template" in refused.json()["error"]["message"]


def test_an_empty_text_embeds_to_the_zero_vector_beside_the_others(mlm_run):
    """Found by the fuzzing above: an empty text (no tokens) was a 500; it is the zero vector, and its batch-mates
    are what they are alone."""
    model, tokenizers = load_checkpoint(mlm_run)
    embedder = Embedder(model, tokenizers, Pooling())
    together = embedder.embed(["", "the cat sat"])
    assert together[0].abs().sum() == 0 and together[1].abs().sum() > 0
    assert (together[1] - embedder.embed(["the cat sat"])[0]).abs().max() < 1e-5


def test_adversarial_bodies_are_4xx_never_5xx(tmp_path):
    """What no schema generates: text from every Unicode plane, 1 MB of one character, JSON nested 100,000 deep,
    numbers of 10,000 digits, NaN and Infinity literals, on the native and the OpenAI routes of a live server:
    an answer or a 4xx, never a 5xx (deep nesting and long numbers were 500 on /v1), and the server alive after."""
    limits = Limits(max_new_tokens=8)
    planes = "".join(chr(c) for c in (0x41, 0x3A9, 0x4E2D, 0x1F600, 0x10400, 0x20000, 0x30000, 0xE0041, 0xF0000,
                                      0x10FFFD))
    deep, digits = "[" * 100_000 + "]" * 100_000, "9" * 10_000
    bodies = {"/generate": [{"prompt": planes, "max_new_tokens": 4}, '{"prompt": ' + deep + "}",
                            '{"prompt": "a", "max_new_tokens": ' + digits + "}", '{"prompt": "a", "temperature": NaN}',
                            '{"prompt": "a", "temperature": 0.' + digits + "}", {"prompt": "a" * 1_000_000}],
              "/v1/completions": [{"model": "m", "prompt": planes, "max_tokens": 4},
                                  '{"model": "m", "prompt": ' + deep + "}",
                                  '{"model": "m", "prompt": "a", "max_tokens": ' + digits + "}",
                                  '{"model": "m", "prompt": "a", "temperature": Infinity}'],
              "/v1/chat/completions": [{"model": "m", "messages": [{"role": "user", "content": planes}],
                                        "max_tokens": 4}]}
    app = create_app(TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "lm")), limits, name="m")
    with serving(app, limits) as url:
        for path, cases in bodies.items():
            for body in cases:
                raw = body if isinstance(body, str) else json.dumps(body)
                answer = httpx.post(url + path, content=raw.encode(), headers={"content-type": "application/json"},
                                    timeout=60)
                assert answer.status_code < 500, (path, raw[:80], answer.status_code, answer.text[:200])
        assert httpx.get(url + "/health").json()["status"] == "ok"
