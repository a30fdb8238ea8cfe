"""/v1/completions and /v1/chat/completions over the scheduler: one job per choice, stop strings cut
in the text, log-probabilities in OpenAI's two layouts, answers whole or as Server-Sent Events."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.constraint import Grammar
from aiayn.inference.generator import TextGenerator
from aiayn.serve.choices import Calls, Choice
from aiayn.serve.jobs import DecodeJob, Finished, Refused
from aiayn.serve.limits import Limits
from aiayn.serve.logprobs import chat_logprobs, completion_logprobs, echoed
from aiayn.serve.openai_schema import OpenAIError, openai_refusal
from aiayn.serve.scheduler import Scheduler


def schema_of(response_format) -> dict:
    """``response_format`` as decoding fields: ``json_object`` is any JSON object, ``json_schema`` its schema."""
    if response_format is None or response_format.type == "text":
        return {}
    if response_format.type == "json_object":
        return {"json_schema": '{"type": "object"}'}
    return {"json_schema": json.dumps(response_format.json_schema.schema_ or {})}


class TextRoutes:
    """What the two text endpoints share: jobs in, OpenAI's answer out."""

    def __init__(self, name: str, generator: TextGenerator, batcher: Scheduler, limits: Limits, mcp=None) -> None:
        """``mcp``: the server's MCP tools (``serve/mcp_tools.py``), or None."""
        self.name, self.generator, self.batcher, self.limits, self.mcp = name, generator, batcher, limits, mcp

    def check_count(self, prompts: list, field: str) -> None:
        """413 for more prompts than the server takes in one request (their lengths are counted in tokens, against
        the context: the scheduler's check)."""
        if (over := self.limits.oversize(prompts, field, chars=False)) is not None:
            raise OpenAIError(413, over, field)

    def completion_prompts(self, prompt) -> tuple[list[list[int]], list[str]]:
        """A completion's prompts as ids and as the text they echo: one text or several, one list of token ids or
        several (400 for an id outside the vocabulary; 413 over the size limits)."""
        prompts = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt)
        vocab, ids, shown = len(self.generator.tokenizer), [], []
        if not prompts:
            raise OpenAIError(400, "prompt: empty; give a text or token ids", "prompt")
        for p in prompts:
            if isinstance(p, str):
                ids.append(self.generator.prompt_ids(p))
                shown.append(p)
            elif not p or not all(0 <= i < vocab for i in p):
                raise OpenAIError(400, f"prompt: token ids must be 0 to {vocab - 1}, at least one", "prompt")
            else:
                ids.append(list(p))
                shown.append(self.generator.tokenizer.decode(p))
        self.check_count(shown, "prompt")
        return ids, shown

    async def complete(self, request: Request, req, ids: list[list[int]], shown: list[str], adapter: int = 0):
        """A completion: generated (``answer``), or with ``max_tokens`` 0 nothing generated; with ``echo``, each
        choice's text starts with its prompt, and with ``logprobs`` the prompt's tokens are scored too (the first
        has no context: ``null``), as harnesses score a continuation."""
        if req.echo and (req.stream or (req.logprobs is not None and adapter)):
            raise OpenAIError(400, "echo: not with stream, nor with logprobs and an adapter", "echo")
        if req.max_tokens == 0:
            if req.stream:
                raise OpenAIError(400, "max_tokens: 0 (nothing generated) does not stream", "max_tokens")
            body = self._nothing_generated(req, ids)
        else:
            body = await self.answer(request, req, ids, "text_completion", req.logprobs, adapter=adapter)
            if not isinstance(body, dict):  # a stream, or a client gone
                return body
        if req.echo:
            scored = None if req.logprobs is None else [await self._scored(p, req.logprobs) for p in ids]
            for choice in body["choices"]:
                p = choice["index"] // req.n
                choice["text"] = shown[p] + choice["text"]
                if scored is not None:
                    choice["logprobs"] = echoed(ids[p], scored[p], choice["logprobs"], self.generator)
        return body

    def _nothing_generated(self, req, ids: list[list[int]]) -> dict:
        empty = None if req.logprobs is None else {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                                   "text_offset": []}
        choices = [{"index": i, "text": "", "finish_reason": "length", "logprobs": empty}
                   for i in range(len(ids) * req.n)]
        prompt = sum(len(p) for p in ids)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": req.model, "choices": choices,
                "usage": {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}}

    async def _scored(self, ids: list[int], top: int) -> list:
        """The prompt's log-probabilities, computed on the decoding thread between two steps."""
        if len(ids) > self.batcher.capacity:
            raise OpenAIError(400, f"prompt: {len(ids)} tokens, more than the {self.batcher.capacity} the server "
                                   "takes", "prompt", "context_length_exceeded")
        return await asyncio.wrap_future(self.batcher.run_alone(self.generator.prompt_logprobs, ids, top))

    def _jobs(self, req, prompts: list[list[int]], logprobs: int | None, emit, chat: bool,
              calls: Calls | None, think: bool | None = None) -> list[Choice]:
        count = len(prompts) * req.n
        if count > self.limits.max_beam_size:
            raise OpenAIError(400, f"n: {count} choices; the server takes {self.limits.max_beam_size} a request", "n")
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        base, grammar = self._decoding(req, calls)
        choices = []
        for p, ids in enumerate(prompts):
            max_new = self._max_new(req, chat, ids)
            for k in range(req.n):
                index = p * req.n + k
                seed = {} if req.seed is None else {"seed": (req.seed + k) % 2 ** 53}  # choice k: seed + k
                length = {"min_new_tokens": max_new} if req.ignore_eos else {}  # no end before max_tokens
                job = DecodeJob(ids, base.replace(max_new_tokens=max_new, **seed, **length),
                                lambda e, i=index: emit(i, e),
                                logprobs, grammar)
                choices.append(Choice(index, job, self.generator, stops, calls, think))
                choices[-1].ids = [] if req.return_token_ids else None
        return choices

    def _decoding(self, req, calls: Calls | None) -> tuple[DecodingConfig, Grammar | None]:
        """The server's decoding (generation.json, then ``aiayn serve``'s flags) with the request's sampling
        fields, its ``response_format`` or its tool choice's grammar; that grammar, compiled (400 naming what is
        wrong)."""
        fields = {name: getattr(req, name) for name in ("temperature", "top_p", "min_p", "repetition_penalty",
                                                         "frequency_penalty", "presence_penalty", "logit_bias")}
        fields.update(top_k=None if req.top_k is None else max(req.top_k, 0), **schema_of(req.response_format))
        if calls is not None:
            try:  # the tools' grammar takes the response_format's schema in (or refuses it with a forced call)
                grammar = calls.grammar(json.loads(fields["json_schema"]) if "json_schema" in fields else None)
            except ValueError as err:
                raise OpenAIError(400, str(err), "response_format") from None
            if grammar is not None:
                fields.update(json_schema=None, grammar=grammar)
        try:
            decoding = self.generator.decoding.replace(**{k: v for k, v in fields.items() if v is not None})
            return decoding, self.generator.grammars.for_decoding(decoding)
        except ValueError as err:
            field = "response_format" if str(err).startswith(("json_schema", "grammar")) else str(err).split(":")[0]
            raise OpenAIError(400, f"{field}: {err}", field) from None

    def _max_new(self, req, chat: bool, ids: list[int]) -> int:
        """The request's limit; without one, a completion's is OpenAI's 16, a chat's the end of its turn: the
        checkpoint's generation.json limit if it sets one, else as far as the server's limit and the context go."""
        given = getattr(req, "max_completion_tokens", None) or req.max_tokens
        if given is not None:
            return given
        if not chat:
            return 16
        if "max_new_tokens" in self.generator.decoding.changes():
            return self.generator.decoding.max_new_tokens
        return max(1, min(self.limits.max_new_tokens, self.batcher.capacity - len(ids)))

    async def answer(self, request: Request, req, prompts: list[list[int]], kind: str, logprobs: int | None,
                     calls: Calls | None = None, adapter: int = 0, frame=None, think: bool | None = None):
        """Answer ``prompts`` (their ids) as OpenAI's ``kind`` (text_completion or chat.completion); ``calls``:
        the chat's tools; ``adapter``: the LoRA adapter the request's ``model`` names (0: the base); ``think``: a
        chat's reasoning part (``choices.Thinking``: None, none; else whether the prompt opened it). A stream's
        chunks are framed as Server-Sent Events by ``frame`` (chunks -> event texts; default: ``data: {chunk}``
        lines and ``data: [DONE]``)."""
        loop, events = asyncio.get_running_loop(), asyncio.Queue()

        def emit(index: int, event: dict) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (index, event))

        choices = self._jobs(req, prompts, logprobs, emit, kind.startswith("chat"), calls, think)
        for choice in choices:
            choice.job.adapter = adapter
        try:
            self.batcher.submit(*(choice.job for choice in choices))
        except Refused as err:
            raise openai_refusal(err) from None
        head = {"id": f"{'chatcmpl' if kind.startswith('chat') else 'cmpl'}-{uuid.uuid4().hex}",
                "object": kind + (".chunk" if req.stream and kind.startswith("chat") else ""),
                "created": int(time.time()), "model": req.model}
        if req.stream:
            chunks = self._chunks(request, req, choices, events, head, kind)
            return StreamingResponse((frame or sse)(chunks), media_type="text/event-stream")
        try:
            texts, reasons, watch = {c.index: "" for c in choices}, {}, Watch(request)
            while len(reasons) < len(choices):
                found = await watch.next(events)
                if found is None:  # the client went away: its rows leave at the next step (finally)
                    return JSONResponse({"detail": "client disconnected"}, status_code=499)
                index, event = found
                choice = choices[index]
                if isinstance(event, Finished):
                    text, _, reasons[index] = choice.end(event)
                else:
                    text, _ = choice.take(event)
                texts[index] += text
        finally:
            for choice in choices:
                choice.job.cancelled = True
        body = [self._choice(kind, c, texts[c.index], reasons[c.index], logprobs) for c in choices]
        return {**head, "choices": body, "usage": self._usage(choices)}

    def _choice(self, kind: str, choice: Choice, text: str, reason: str | None, logprobs: int | None,
                delta: bool = False, first: bool = False, calls: list[dict] | None = None) -> dict:
        chat = kind.startswith("chat")
        out = {"index": choice.index, "finish_reason": reason}
        if reason is not None and choice.stop.matched is not None:
            out["stop_reason"] = choice.stop.matched  # vLLM's: the stop string that ended the choice
        if chat and delta:
            thought, choice.thought = choice.thought, ""
            out["delta"] = {**({"role": "assistant"} if first else {}), **({"content": text} if text else {}),
                            **({"reasoning_content": thought} if thought else {}),
                            **({"tool_calls": calls} if calls else {})}
        elif chat:
            made = choice.calls
            content = text.strip() or None if made else text
            out["message"] = {"role": "assistant", "content": content, **({"tool_calls": made} if made else {}),
                              **({"reasoning_content": choice.reasoning} if choice.reasoning else {})}
        else:
            out["text"] = text
        if choice.ids is not None:  # vLLM's return_token_ids: the prompt's once, then the ids each chunk adds
            out.update({"prompt_token_ids": list(choice.job.prompt)} if first or not delta else {},
                       token_ids=choice.ids, **({"drafted": choice.drafted} if choice.job.drafted else {}))
            choice.ids, choice.drafted = ([], []) if delta else (choice.ids, choice.drafted)
        tokens, choice.tokens = choice.tokens, [] if delta else choice.tokens
        out["logprobs"] = None if logprobs is None else (chat_logprobs(tokens, self.generator) if chat
                                                         else completion_logprobs(tokens, self.generator))
        return out

    def _usage(self, choices: list[Choice]) -> dict:
        prompts = {id(c.job.prompt): len(c.job.prompt) for c in choices}  # a prompt counts once for n choices
        cached = {}
        for c in choices:  # the prompt tokens the prefix cache served (OpenAI reports prompt caching so)
            cached[id(c.job.prompt)] = max(cached.get(id(c.job.prompt), 0), c.job.cached_tokens)
        completion = sum(len(c.job.generated) for c in choices)
        return {"prompt_tokens": sum(prompts.values()), "completion_tokens": completion,
                "total_tokens": sum(prompts.values()) + completion,
                "prompt_tokens_details": {"cached_tokens": sum(cached.values())}}

    async def _chunks(self, request: Request, req, choices: list[Choice], events: asyncio.Queue, head: dict,
                      kind: str):
        """A stream's chunks (dicts), one per event that adds text, log-probabilities or calls, then with
        ``include_usage`` a last one with the usage and no choices."""
        logprobs = choices[0].job.logprobs
        first, done = {c.index: True for c in choices}, set()
        running_usage = (req.stream_options or {}).get("continuous_usage_stats", False)
        try:
            while len(done) < len(choices):
                index, event = await events.get()
                choice = choices[index]
                if isinstance(event, Finished):
                    text, calls, reason = choice.end(event)
                    done.add(index)
                else:
                    (text, calls), reason = choice.take(event), None
                    if not text and not calls and not first[index] and not choice.tokens and not choice.thought:
                        continue
                body = self._choice(kind, choice, text, reason, logprobs, delta=True, first=first[index],
                                    calls=calls)
                first[index] = False
                usage = {"usage": self._usage(choices)} if running_usage else {}  # vLLM's continuous_usage_stats
                yield {**head, "choices": [body], **usage}
                if await request.is_disconnected():
                    return
            if (req.stream_options or {}).get("include_usage"):
                yield {**head, "choices": [], "usage": self._usage(choices)}
        finally:
            for choice in choices:
                choice.job.cancelled = True  # a client that went away frees its rows at the next step


async def sse(chunks):
    """OpenAI's framing of a stream: one ``data: {chunk}`` event per chunk, then ``data: [DONE]``."""
    async for chunk in chunks:
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


class Watch:
    """Whether the client is still there, asked at most every ``every_s`` seconds while events flow."""

    def __init__(self, request: Request, every_s: float = 0.05) -> None:
        self.request, self.every_s, self.checked = request, every_s, time.monotonic()

    async def next(self, events: asyncio.Queue):
        """The next (index, event), or None once the client has disconnected."""
        while True:
            if time.monotonic() - self.checked > self.every_s:
                self.checked = time.monotonic()
                if await self.request.is_disconnected():
                    return None
            try:
                return await asyncio.wait_for(events.get(), self.every_s)
            except TimeoutError:
                continue
