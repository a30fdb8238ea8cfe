"""One choice of an OpenAI text answer: its job, its text after stop strings (``StopText``), its tool calls taken
out of the text (``serve/tools.py``) and its tokens' log-probabilities."""

from __future__ import annotations

from aiayn.inference.generator import TextGenerator, TextStream
from aiayn.serve.jobs import DecodeJob, Finished, Token
from aiayn.serve.tools import parser_for
from aiayn.serve.toolstream import held_back


class StopText:
    """The text of one choice as its tokens arrive, cut before the first stop string. Text that could still
    become a stop string is held back until it cannot."""

    def __init__(self, stops: list[str]) -> None:
        self.stops, self.text, self.sent, self.stopped = [s for s in stops if s], "", 0, False
        self.matched: str | None = None  # the stop string that ended the text (vLLM's ``stop_reason``)

    def add(self, piece: str) -> str:
        """The text that may be sent now."""
        self.text += piece
        found = [(i, s) for s in self.stops if (i := self.text.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: f[0])
            self.text, self.stopped = self.text[:cut], True
            return self.flush()
        hold = max((held_back(self.text, s) for s in self.stops), default=0)
        return self._send(len(self.text) - hold)

    def flush(self) -> str:
        return self._send(len(self.text))

    def _send(self, end: int) -> str:
        end = max(end, self.sent)
        new, self.sent = self.text[self.sent:end], end
        return new


class Calls:
    """A chat request's tools: the functions offered, the ``tool_choice``, and the grammar that enforces a
    ``required`` or named choice, or with a ``response_format`` lets ``auto`` answer with a call or that JSON
    (``serve/tools.py``: the parser of the format the template teaches)."""

    def __init__(self, tools: list[dict], choice: str | dict, tokenizer=None, template: str | None = None) -> None:
        """``template``: the chat template's text, which says the call format (``serve/tools.parser_for``)."""
        self.tools, self.choice, self.names = tools, choice, {t["function"]["name"] for t in tools}
        self.parser = parser_for(template)
        token_id = getattr(tokenizer, "token_id", lambda _: None)  # a tokenizer.json's added tokens, if any
        self.marker_ids = {m: token_id(m) for m in (self.parser.open, self.parser.close) if m}

    def grammar(self, answer: dict | None = None) -> str | None:
        """The grammar of the choice (its parser's); ``answer``: the ``response_format`` schema."""
        return self.parser.grammar(self.tools, self.choice, self.marker_ids, answer)


class Thinking:
    """A reasoning model's ``<think>`` ... ``</think>`` part taken out of its text as it streams (vLLM's
    ``reasoning_content``): a ``<think>`` that opens the reply (or that the prompt opened: ``inside``) starts it,
    ``</think>`` ends it; the spaces around each part are dropped. Text that could still become a tag is held."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self, inside: bool = False) -> None:
        self.inside, self.held, self.started, self.trim = inside, "", inside, True

    def add(self, piece: str) -> tuple[str, str]:
        """(reasoning, content) that may be sent now."""
        self.held += piece
        reasoning = content = ""
        while True:
            if self.trim:  # the start of a part: its leading spaces are dropped
                self.held = self.held.lstrip()
            if self.inside:
                end = self.held.find(self.CLOSE)
                if end < 0:  # held: a tag's start, and the spaces before it (dropped if the part ends there)
                    sent = len(self.held[:len(self.held) - held_back(self.held, self.CLOSE)].rstrip())
                    reasoning, self.held = reasoning + self.held[:sent], self.held[sent:]
                    self.trim = self.trim and not reasoning
                    return reasoning, content
                reasoning += self.held[:end].rstrip()
                self.held, self.inside, self.trim = self.held[end + len(self.CLOSE):], False, True
                continue
            if not self.started and self.held and self.OPEN.startswith(self.held):
                return reasoning, content  # maybe the tag that opens the reply
            if not self.started and self.held.startswith(self.OPEN):
                self.held, self.inside, self.started = self.held[len(self.OPEN):], True, True
                continue
            self.started = self.started or bool(self.held)
            content, self.held = content + self.held, ""
            self.trim = self.trim and not content
            return reasoning, content

    def flush(self) -> tuple[str, str]:
        rest, self.held = self.held, ""
        return (rest.rstrip(), "") if self.inside else ("", rest)


class Choice:
    """One choice: its job, its text so far (after stop strings; a reasoning part and tool calls taken out), its
    tokens' log-probabilities, the tool calls it made."""

    def __init__(self, index: int, job: DecodeJob, generator: TextGenerator, stops: list[str],
                 calls: Calls | None = None, think: bool | None = None) -> None:
        """``think``: None, no reasoning part is looked for; else whether the prompt opened one."""
        self.index, self.job, self.generator = index, job, generator
        self.stream, self.stop = TextStream(generator.tokenizer), StopText(stops)
        self.tools = None if calls is None else calls.parser.stream(calls.names)
        self.thinking = None if think is None else Thinking(think)
        self.tokens: list[dict] = []  # per token: id, its text, logprob, top alternatives
        self.ids: list[int] | None = None  # with return_token_ids: the ids not sent yet
        self.drafted: list[bool] = []  # with return_token_ids: per id not sent yet, whether a draft guessed it
        self.reasoning, self.thought = "", ""  # the reasoning part: all of it, and what is not sent yet

    def take(self, event: Token) -> tuple[str, list[dict]]:
        """A token event -> the text it adds (after stop strings) and the tool calls it completes."""
        piece = self.stream.add(event.id)
        if self.ids is not None and not self.stop.stopped:
            self.ids.append(event.id)
            self.drafted.append(event.drafted)
        if event.logprob is not None and not self.stop.stopped:
            self.tokens.append({"id": event.id, "text": self.generator.tokenizer.decode([event.id]),
                                "logprob": event.logprob, "top": event.top})
        text = "" if self.stop.stopped else self.stop.add(piece)
        if self.stop.stopped:
            self.job.cancelled = True  # its row leaves at the next step
        return self._calls(self._think(text))

    @property
    def calls(self) -> list[dict]:
        """The tool calls made, whole (OpenAI's ``tool_calls``)."""
        return [] if self.tools is None else self.tools.calls

    def end(self, event: Finished) -> tuple[str, list[dict], str]:
        """The final event -> the text still held, the calls it completes, the finish reason (``tool_calls``
        when the choice made any, unless it ended inside one: ``length``)."""
        text = self._think(self.stop.flush())
        if self.thinking is not None:
            reasoning, rest = self.thinking.flush()
            self.reasoning, self.thought, text = self.reasoning + reasoning, self.thought + reasoning, text + rest
        text, deltas = self._calls(text)
        if self.tools is not None:
            rest, more = self.tools.flush()
            text, deltas = text + rest, deltas + more
        stopped = self.stop.stopped or event.finish_reason == "stop"
        cut = self.tools is not None and self.tools.cut
        return text, deltas, "tool_calls" if self.calls and not cut else "stop" if stopped else "length"

    def _think(self, text: str) -> str:
        if self.thinking is None:
            return text
        reasoning, text = self.thinking.add(text)
        self.reasoning, self.thought = self.reasoning + reasoning, self.thought + reasoning
        return text

    def _calls(self, text: str) -> tuple[str, list[dict]]:
        return (text, []) if self.tools is None else self.tools.add(text)
