"""A chat answer's tool calls taken out of its text as the tokens arrive, streamed as OpenAI streams them: a call's
id and name first, then its arguments in fragments, as the model writes them."""

from __future__ import annotations

import re
import uuid
from typing import Protocol

LEADS = ("<|python_tag|>", "[TOOL_CALLS]")  # markers a whole-reply call may start with (Llama 3's, Mistral's)
BARE = ("{", "[", "`", *LEADS)  # how a reply that is a bare, fenced or marked JSON call starts


class Parser(Protocol):
    """What the stream reads of its format (``serve/tools.py::ToolParser``)."""

    open: str | None
    close: str | None

    @property
    def tagged(self) -> bool: ...

    def block_calls(self, block: str, names: set[str]) -> tuple[str, list[dict]]: ...

    def bare(self, text: str, names: set[str]) -> list[dict]: ...


def held_back(text: str, marker: str) -> int:
    """How many of ``text``'s last characters may be the start of ``marker`` (held until the next piece says)."""
    return max((k for k in range(1, len(marker)) if text.endswith(marker[:k])), default=0)

# the start of a tagged call's object (Hermes'), up to where its arguments begin
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


class ToolStream:
    """Text outside calls passes as content. A tagged format (Hermes' ``<tool_call>`` ... ``</tool_call>``,
    ``parser.tagged``): once a call's name is
    read (an offered function), its delta goes out (``delta.tool_calls[i]`` with its id and name), then each piece
    of its arguments as the model writes them (the object's closing brace held back until the call closes); text
    that could still become ``<tool_call>`` is held until it cannot. A call written otherwise (its arguments before
    its name) goes out whole when it closes; one that names no function offered, or is not JSON, stays text. A
    reply that starts as a bare, fenced or marked JSON call (Llama 3's and Mistral's formats) is held whole until
    the end (``flush``). ``calls``: the calls made, whole (their arguments: the fragments joined)."""

    def __init__(self, names: set[str], parser: Parser) -> None:
        self.names, self.parser, self.held = names, parser, ""
        self.bare = True  # nothing sent yet: the whole reply may still be a bare or fenced JSON call
        self.inside = False  # between the format's two markers; ``held`` is the text after the first
        self.streamed: dict | None = None  # the call whose arguments are being streamed
        self.sent = 0  # of its arguments' text, what went out
        self.calls: list[dict] = []
        self.cut = False  # the reply ended inside a streamed call

    def add(self, piece: str) -> tuple[str, list[dict]]:
        """(content that may be sent now, tool-call deltas made by ``piece``)."""
        self.held += piece
        if self.bare and (not self.held.strip() or self.held.lstrip().startswith(BARE)):
            return "", []  # held whole until the end: a reply that is one JSON call (flush decides)
        self.bare = False
        if not self.parser.tagged:  # the reply is text (a call would have been held whole, above)
            content, self.held = self.held, ""
            return content, []
        opening, closing = self.parser.open, self.parser.close
        content, deltas = "", []
        while True:
            if not self.inside:
                start = self.held.find(opening)
                if start < 0:
                    cut = len(self.held) - held_back(self.held, opening)
                    content, self.held = content + self.held[:cut], self.held[cut:]
                    return content, deltas
                content, self.held = content + self.held[:start], self.held[start + len(opening):]
                self.inside = True
            end = self.held.find(closing)
            written = self.held[:end] if end >= 0 else self.held[:len(self.held) - held_back(self.held, closing)]
            deltas += self._name() + self._arguments(written)
            if end < 0:
                return content, deltas
            body, self.held, self.inside = self.held[:end], self.held[end + len(closing):], False
            if self.streamed is None:  # not streamed: whole, or text
                text, calls = self.parser.block_calls(opening + body + closing, self.names)
                content += text
                deltas += [self._new(call) for call in calls]
            self.streamed = None

    def _name(self) -> list[dict]:
        """The delta that opens a call, once its name is read and offered."""
        found = _HEAD.match(self.held) if self.streamed is None else None
        if found is None or found.group(1) not in self.names:
            return []
        self.streamed, self.sent = self._new({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                              "function": {"name": found.group(1), "arguments": ""}}), found.end()
        return [self.streamed]

    def _arguments(self, body: str) -> list[dict]:
        """The next fragment of the streamed call's arguments: up to the end of ``body`` (the call's text so far)
        less its trailing spaces and the brace that may close the call's object."""
        if self.streamed is None:
            return []
        text = body.rstrip()
        if text.endswith("}"):  # maybe the object's own closing brace: held until more comes (dropped at the end)
            text = text[:-1].rstrip()
        if len(text) <= self.sent:
            return []
        fragment, self.sent = text[self.sent:], len(text)
        call = self.calls[self.streamed["index"]]
        call["function"]["arguments"] += fragment
        return [{"index": self.streamed["index"], "function": {"arguments": fragment}}]

    def flush(self) -> tuple[str, list[dict]]:
        """At the end: a reply held whole that is one bare, fenced or marked JSON call (or a list of them) becomes
        those calls; anything else held (an unfinished call, other JSON) goes out as content."""
        rest, self.held = self.held, ""
        if self.inside:
            rest = self.parser.open + rest
        if self.streamed is not None:  # a call cut short (max_tokens): it stays the call it started as
            self.cut = True
            return "", []
        calls = self.parser.bare(rest, self.names) if self.bare else []
        return ("", [self._new(call) for call in calls]) if calls else (rest, [])

    def _new(self, call: dict) -> dict:
        """A call made: kept whole in ``calls``; its delta (with its index)."""
        self.calls.append({**call, "function": dict(call["function"])})
        return {"index": len(self.calls) - 1, **call, "function": dict(call["function"])}
