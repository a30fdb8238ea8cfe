"""The tool loop of ``aiayn serve --mcp``: a chat request that sends no ``tools`` of its own is offered the MCP
servers' tools (``serve/mcp_tools.py``), its ``tool_choice`` applied to them as to a client's own on the first
round; each call the model makes is run by the server and its result fed back as a ``tool`` message, until the
model answers without one (at most ``ROUNDS`` rounds: the last offers no tools). A client that sends ``tools``
keeps its own loop: the server's tools are not added to them.

The answer is the last round's, the usage that of all rounds; the calls made and their results come back as
``mcp_calls`` (aiayn's field, beside OpenAI's): in the message, or streamed as a delta once each is run, the
rounds' text streamed as it is generated."""

from __future__ import annotations

import asyncio

from fastapi.responses import StreamingResponse

from aiayn.serve.openai_schema import AssistantMessage, ChatRequest, OpenAIError, Tool, ToolMessage
from aiayn.serve.openai_text import sse

ROUNDS = 8


def uses_mcp(req: ChatRequest, mcp) -> bool:
    """Whether the server's tools answer ``req``: it has some, the request sends none and does not refuse them."""
    return mcp is not None and not req.tools and req.tool_choice != "none"


async def mcp_answer(req: ChatRequest, mcp, answer, frame=None):
    """``req`` answered through the tool loop; ``answer(req)``: one round, as /v1/chat/completions answers it
    (a body, or for a stream a ``StreamingResponse`` of chunk dicts); ``frame`` as ``TextRoutes.answer``'s."""
    if req.n > 1:
        raise OpenAIError(400, "n: the server's MCP tools run for one choice; send n 1", "n")
    if req.stream:
        return StreamingResponse((frame or sse)(_streamed(req, mcp, answer)), media_type="text/event-stream")
    messages, made, usage = list(req.messages), [], None
    for r in range(ROUNDS):
        body = await answer(_round(req, mcp, messages, r))
        if not isinstance(body, dict):  # the client went away
            return body
        usage = _summed(usage, body["usage"])
        message = body["choices"][0]["message"]
        if body["choices"][0]["finish_reason"] != "tool_calls":  # an answer (or a call cut short: not run)
            break
        results = await _run(mcp, message["tool_calls"])
        made += results
        messages += _turns(message.get("content"), message["tool_calls"], results)
    body["choices"][0]["message"]["mcp_calls"] = made
    return {**body, "usage": usage}


def round_choice(first, r: int):
    """Round ``r``'s tool choice: the one asked for (``first``) on the first round, then ``auto``, and ``none`` on
    the last round (an answer, not another call)."""
    return "none" if r == ROUNDS - 1 else first if r == 0 else "auto"


def _round(req: ChatRequest, mcp, messages: list, r: int) -> ChatRequest:
    """Round ``r``'s request: the conversation so far, the server's tools, :func:`round_choice`."""
    return req.model_copy(update={"messages": messages, "tools": [Tool.model_validate(s) for s in mcp.specs],
                                  "tool_choice": round_choice(req.tool_choice, r)})


async def _run(mcp, calls: list[dict]) -> list[dict]:
    """Each call run by its server, in order: ``{id, server, name, arguments, result, is_error}``."""
    done = []
    for call in calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        result = await asyncio.wrap_future(mcp.call(name, arguments))
        done.append({"id": call["id"], "server": mcp.owner.get(name, ""), "name": name, "arguments": arguments,
                     "result": result, "is_error": result.startswith("error: ")})
    return done


def _turns(content: str | None, calls: list[dict], results: list[dict]) -> list:
    """The assistant's calls and a ``tool`` message with each result, as the next round's prompt has them."""
    return [AssistantMessage.model_validate({"role": "assistant", "content": content, "tool_calls": calls}),
            *(ToolMessage(role="tool", content=r["result"], tool_call_id=r["id"]) for r in results)]


def _summed(usage: dict | None, more: dict | None) -> dict | None:
    if usage is None or more is None:
        return more or usage
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) + \
        (more.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {**{k: usage[k] + more[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
            "prompt_tokens_details": {"cached_tokens": cached}}


async def _streamed(req: ChatRequest, mcp, answer):
    """The rounds' chunks as one stream: each round's text and log-probabilities as they come, its calls held
    back (the server runs them) and sent as ``mcp_calls`` with their results; one role, one finish, one usage."""
    messages, usage, first, head = list(req.messages), None, True, {}
    for r in range(ROUNDS):
        response = await answer(_round(req, mcp, messages, r).model_copy(update={"stream_options": {
            **(req.stream_options or {}), "include_usage": True}}))
        calls, content, finish, chunks = {}, "", None, response.body_iterator
        try:
            async for chunk in chunks:
                head = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
                if not chunk["choices"]:
                    usage = _summed(usage, chunk.get("usage"))
                    continue
                choice = chunk["choices"][0]
                delta = choice.get("delta", {})
                for part in delta.pop("tool_calls", None) or []:
                    _gather(calls, part)
                content += delta.get("content") or ""
                if not first:
                    delta.pop("role", None)
                first, finish = False, choice.get("finish_reason") or finish
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = None  # this round's end is not the answer's
                if delta or choice.get("finish_reason") or choice.get("logprobs") or "token_ids" in choice:
                    yield chunk
        finally:
            await chunks.aclose()  # a client gone: the round's rows leave at the next step
        if finish != "tool_calls":  # the answer is given (or the client went away)
            break
        made = [calls[i] for i in sorted(calls)]
        results = await _run(mcp, made)
        messages += _turns(content or None, made, results)
        yield {**head, "choices": [{"index": 0, "delta": {"mcp_calls": results}, "finish_reason": None,
                                    "logprobs": None}]}
    if (req.stream_options or {}).get("include_usage"):
        yield {**head, "choices": [], "usage": usage}


def _gather(calls: dict, part: dict) -> None:
    """A streamed call's delta added to the whole call it belongs to (its first delta has its id and name)."""
    call = calls.setdefault(part["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    call["id"] = part.get("id") or call["id"]
    call["function"]["name"] += part.get("function", {}).get("name") or ""
    call["function"]["arguments"] += part.get("function", {}).get("arguments") or ""
