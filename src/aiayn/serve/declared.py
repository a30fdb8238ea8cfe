"""What /openapi.json declares beyond FastAPI's defaults, so that the schema says what the server does (a client
generated from it, or Schemathesis, meets no undeclared answer): every error status a route can answer with its
body's shape, and the request bodies of the OpenAI routes (which parse their own JSON to answer in OpenAI's
error shape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, ClassVar

from fastapi import FastAPI
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from aiayn.decoding.config import MAX_BIASES

# OpenAI's logit_bias: token ids (as JSON keys, text) to what is added to their scores, -100 (a ban) to 100
LogitBias = Annotated[dict[Annotated[str, Field(pattern=r"^\d{1,9}$")], Annotated[float, Field(ge=-100, le=100)]],
                      Field(max_length=MAX_BIASES)]
STREAMS = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages")
MESSAGE = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
OPENAI_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
NATIVE = {"400": "the body is not JSON", "401": "missing or wrong API key (with --api-key)",
          "404": "no such position (a query past the text)",
          "408": "the body did not arrive in time",
          "413": "a size over the server's limits", "422": "an invalid request: a field, a value, or a decoding the "
          "model cannot run", "429": "busy: too many requests open", "503": "shutting down"}
ANTHROPIC_ERROR = {"type": "object", "required": ["type", "error"], "properties": {
    "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"],
                                          "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}
OPENAI = {"400": "an invalid request, in OpenAI's shape", "401": "missing or wrong API key",
          "404": "no such model", "413": "a size over the server's limits", "429": "busy", "503": "shutting down"}


def declare(app: FastAPI, bodies: dict[str, type[BaseModel]]) -> None:
    """Make ``app.openapi()`` declare every route's error answers (native routes: ``{"detail": ...}``, a string or
    FastAPI's list of field errors; ``/v1``: OpenAI's error object) and the request bodies in ``bodies``
    (path -> model) that a route reads itself."""
    def edit(schema: dict) -> None:
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                _errors(operation, path)
                if path in STREAMS:  # "stream": true answers Server-Sent Events
                    operation["responses"]["200"].setdefault("content", {})["text/event-stream"] = {"schema": {}}
                if path in bodies:
                    operation["requestBody"] = {"required": True, "content": {"application/json": {
                        "schema": bodies[path].model_json_schema(ref_template="#/components/schemas/{model}")}}}
        for model in bodies.values():
            for name, definition in model.model_json_schema(ref_template="#/components/schemas/{model}").get(
                    "$defs", {}).items():
                schema.setdefault("components", {}).setdefault("schemas", {}).setdefault(name, definition)

    _after_openapi(app, edit)


def declare_fields(app: FastAPI, fields: dict[str, dict[str, dict]]) -> None:
    """Make ``app.openapi()`` state bounds only this server knows (model -> field -> JSON schema keywords merged
    into the field's schema, where it is a component or a request body of its own): the layers and heads its model
    has, its vocabulary, the adapters it serves, the names of the models it serves."""
    def edit(schema: dict) -> None:
        found = _models(schema)
        for model, changes in fields.items():
            for name, keywords in changes.items():
                if model in found:  # an optional field's keywords go to its value's schema, not to null's
                    field = found[model]["properties"][name]
                    for kind in [k for k in field.get("anyOf", ()) if k.get("type") != "null"] or [field]:
                        kind.update(keywords)

    _after_openapi(app, edit)


def declare_ids(app: FastAPI, model: str, field: str, ids: dict) -> None:
    """Make ``app.openapi()`` bound every integer in request ``model``'s ``field`` (token ids, however nested: a
    prompt as ids, or several) by ``ids`` (:func:`vocabulary`)."""
    def bound(node) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer":
                node.update(ids)
            for value in node.values():
                bound(value)
        elif isinstance(node, list):
            for value in node:
                bound(value)

    _after_openapi(app, lambda schema: bound(_models(schema)[model]["properties"][field]))


def undeclare(app: FastAPI, paths: tuple[str, ...]) -> None:
    """Make ``app.openapi()`` leave out ``paths``: routes this server has but its model cannot answer (a chat
    route without a chat template), so a client generated from the schema never calls them."""
    _after_openapi(app, lambda schema: [schema["paths"].pop(path, None) for path in paths])


def _models(schema: dict) -> dict[str, dict]:
    """The schema's request models by name: its components and the request bodies of their own."""
    found = dict(schema.get("components", {}).get("schemas", {}))
    for operations in schema["paths"].values():
        for operation in operations.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None and "title" in body:
                found.setdefault(body["title"], body)
    return found


def _after_openapi(app: FastAPI, edit: Callable[[dict], None]) -> None:
    """``app.openapi()`` with ``edit`` applied once to the schema FastAPI makes (and any edits before it)."""
    make = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = make()
            edit(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


class ExactlyOne(BaseModel):
    """A request that takes exactly one of the fields ``one_of`` names: its check and its schema's ``oneOf``,
    from the one list (the fields default to None and are not nullable)."""

    one_of: ClassVar[tuple[str, ...]] = ()
    model_config = ConfigDict(json_schema_extra=lambda schema, cls: schema.update(
        oneOf=[{"required": [name]} for name in cls.one_of]))

    @model_validator(mode="after")
    def _exactly_one(self):
        if sum(getattr(self, name) is not None for name in self.one_of) != 1:
            raise ValueError("give exactly one of " + " or ".join(f'"{name}"' for name in self.one_of))
        return self


def whole(value):
    """A whole-number field's check before pydantic's, as JSON schema's ``integer`` means it: 90.0 is 90; true,
    false and "90" are not numbers."""
    if isinstance(value, (bool, str)):
        raise ValueError("a whole number")
    return int(value) if isinstance(value, float) and value.is_integer() else value


def number(value):
    """A real-number field's check before pydantic's: true, false and "0.5" are not numbers."""
    if isinstance(value, (bool, str)):
        raise ValueError("a number")
    return value


Whole = Annotated[int, BeforeValidator(whole)]  # a token id, a position, a layer, a head


def _errors(operation: dict, path: str) -> None:
    responses = operation.setdefault("responses", {})
    if path.startswith("/v1/"):
        responses.pop("422", None)  # the OpenAI routes answer 400, in OpenAI's shape; Anthropic's in its own
        shape = ANTHROPIC_ERROR if path.startswith("/v1/messages") else OPENAI_ERROR
        for code, description in OPENAI.items():
            responses.setdefault(code, _json(description.replace("OpenAI's", "its API's"), shape))
        return
    listed = {"$ref": "#/components/schemas/HTTPValidationError"}
    for code, description in NATIVE.items():
        body = {"anyOf": [MESSAGE, listed]} if code == "422" else MESSAGE
        responses[code] = _json(description, body)


# a text with a character that is not a space (a field's ``pattern``), spaces as Python's str.isspace: written out,
# for \s differs between regular expression engines (pydantic's, the generators', JavaScript's)
NONBLANK = "[^\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def _json(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def one_output(limits, strategies: tuple[str, ...]) -> dict:
    """The decoding fields' bounds where a request decodes one output: the strategies the model runs, one
    sequence, the server's (``Limits``) length and beam limits."""
    return {"strategy": {"anyOf": [{"enum": list(strategies)}, {"type": "null"}]},
            "num_return_sequences": {"maximum": 1}, "max_new_tokens": {"maximum": limits.max_new_tokens},
            "beam_size": {"maximum": limits.max_beam_size}}


def vocabulary(tokenizer) -> dict:
    """The JSON schema of one of ``tokenizer``'s ids."""
    return {"type": "integer", "minimum": 0, "maximum": len(tokenizer) - 1}
