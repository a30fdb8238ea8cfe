"""/v1/chat/completions: a conversation rendered by the model's chat template, its tools offered, its tool choice
enforced by a grammar (``serve/tools.py``), answered through ``TextRoutes``. /v1/responses is answered through it."""

from __future__ import annotations

from fastapi import Request

from aiayn.serve.choices import Calls, Thinking
from aiayn.serve.mcp_loop import mcp_answer, uses_mcp
from aiayn.serve.openai_schema import ChatRequest, OpenAIError, check_model
from aiayn.serve.openai_text import TextRoutes
from aiayn.serve.tools import template_messages


async def chat_answer(request: Request, req: ChatRequest, names: list[str], texts: TextRoutes, frame=None):
    """A chat request answered (/v1/chat/completions, and /v1/responses and /v1/messages through it): its
    messages and tools rendered by the model's chat template, its tool choice as a grammar; ``frame``: a stream's
    framing. With the server's MCP tools, through their loop (``serve/mcp_loop.py``)."""
    if uses_mcp(req, texts.mcp):
        check_model(req.model, names)
        return await mcp_answer(req, texts.mcp, lambda one: _answer(request, one, names, texts, lambda c: c), frame)
    return await _answer(request, req, names, texts, frame)


async def _answer(request: Request, req: ChatRequest, names: list[str], texts: TextRoutes, frame=None):
    generator = texts.generator
    adapter = check_model(req.model, names)
    tools, choice = chat_tools(req)
    prompt, ids = rendered(req, generator, tools, choice)
    top = (req.top_logprobs or 0) if req.logprobs else None
    calls = Calls(tools, choice, generator.tokenizer, generator.template) if tools and choice != "none" else None
    think = prompt.rstrip().endswith(Thinking.OPEN) if Thinking.OPEN in (generator.template or "") else None
    return await texts.answer(request, req, [ids], "chat.completion", top, calls, adapter, frame, think)


def rendered(req: ChatRequest, generator, tools: list[dict] | None, choice: str | dict) -> tuple[str, list[int]]:
    """The prompt a chat request renders by the model's chat template (its tools offered unless the choice is
    ``none``), and its token ids; what the template refuses is a 400 naming the field."""
    try:
        messages = template_messages([m.model_dump(exclude_none=True) for m in req.messages])
        prompt = generator.chat_prompt(messages, tools if choice != "none" else None, req.chat_template_kwargs)
    except ValueError as err:
        field = "tools" if str(err).startswith("tools") else "messages"
        raise OpenAIError(400, str(err) if field == "tools" else f"messages: {err}", field) from None
    return prompt, generator.rendered_ids(prompt)


def chat_tools(req: ChatRequest) -> tuple[list[dict] | None, str | dict]:
    """The request's tools (OpenAI's function specs) and its ``tool_choice`` (default: ``auto`` with tools, else
    ``none``); a choice that names no function offered is a 400."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice or ("auto" if tools else "none")
    if not isinstance(choice, str):
        choice = choice.model_dump()
    if choice != "none" and not tools and choice != "auto":
        raise OpenAIError(400, "tool_choice: give tools to choose from", "tool_choice")
    if isinstance(choice, dict) and choice["function"]["name"] not in {t["function"]["name"] for t in tools}:
        raise OpenAIError(400, f"tool_choice: no function named {choice['function']['name']!r} in tools",
                          "tool_choice")
    return tools, choice
