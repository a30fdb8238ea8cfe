"""POST /tokenize and POST /detokenize, in vLLM's shape: a client counts a prompt's tokens (or a conversation's, by
the chat template) against the model's context before it sends it, and reads ids back as text."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from aiayn.serve.declared import ExactlyOne, Whole, declare_fields


class TokenizeRequest(ExactlyOne):
    """A ``prompt``, or chat ``messages`` rendered by the model's template; ``model`` is accepted (one model)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    one_of = ("prompt", "messages")
    model: str | None = None
    prompt: str = Field(None)  # exactly one of prompt and messages; neither may be null
    messages: list[dict] = Field(None, min_length=1)
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = None
    tokens: list[Whole] = Field(max_length=65536)


def add_token_routes(app: FastAPI, tokenizer, context: int, chat=None) -> None:
    """The two routes over ``tokenizer`` (the model's input side); ``context``: the most tokens a prompt and its
    continuation may take (``max_model_len``); ``chat(messages, add_generation_prompt)``: the template's ids
    (None: the model has no template, and the schema takes no ``messages``)."""
    if chat is None:
        declare_fields(app, {"TokenizeRequest": {"messages": {"not": {}}}})

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest) -> dict:
        """{"count", "max_model_len", "tokens"} (and "token_strs" if asked) of a prompt or a conversation."""
        if req.messages is not None:
            if chat is None:
                raise HTTPException(422, "messages: this model has no chat template; send a prompt")
            try:
                ids = chat(req.messages, req.add_generation_prompt)
            except (ValueError, TypeError) as err:
                raise HTTPException(422, f"messages: {err}") from None
        else:
            ids = _encode(tokenizer, req.prompt, req.add_special_tokens)
        strs = {"token_strs": tokenizer.pieces(ids)} if req.return_token_strs else {}
        return {"count": len(ids), "max_model_len": context, "tokens": ids, **strs}

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest) -> dict:
        """{"prompt"}: the text of ``tokens`` (special tokens left out); an id outside the vocabulary is 422."""
        bad = next((t for t in req.tokens if not 0 <= t < len(tokenizer)), None)
        if bad is not None:
            raise HTTPException(422, f"tokens: {bad} is not an id of the vocabulary (0..{len(tokenizer) - 1})")
        return {"prompt": tokenizer.decode(req.tokens)}


def _encode(tokenizer, text: str, special: bool) -> list[int]:
    """Ids of ``text``; without ``special``, no special tokens added (a tokenizer without the choice adds none
    of its own beyond what it always does)."""
    try:
        return tokenizer.encode(text, add_special_tokens=special)
    except TypeError:
        return tokenizer.encode(text)
