"""A conversation with a chat model: the turns so far, rendered by the model's chat template, each reply
generated (and streamed) by a :class:`~aiayn.inference.generator.TextGenerator`. When the prompt would leave no
room for the reply in the model's context, the oldest turns are dropped (the system message stays)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiayn.decoding.config import TEXT_MAX_NEW_TOKENS
from aiayn.decoding.prefix import PromptCache, sized_for
from aiayn.inference.generator import TextGenerator


@dataclass
class Chat:
    """The messages of one conversation (``[{"role", "content"}]``) and the generator that answers them.

    ``reply(text)`` adds the user's turn, answers it, and keeps the answer as the assistant's turn (what was
    generated before an interruption, too). ``dropped`` counts the turns trimmed to fit the context so far.
    ``tools``: OpenAI function specs the template offers the model (the caller runs its calls and adds their
    results as ``tool`` messages, then asks for the next reply with no text).
    """

    generator: TextGenerator
    system: str | None = None
    messages: list[dict] = field(default_factory=list)
    dropped: int = 0
    tools: list[dict] | None = None

    def __post_init__(self) -> None:
        if self.generator.chat_template is None:
            raise ValueError("this model has no chat template; use aiayn generate for plain text continuation")
        if self.generator.prompt_cache is None:  # turn n+1 starts with turn n's prompt: its keys/values are kept
            model = self.generator.model
            self.generator.prompt_cache = PromptCache(model, max_bytes=sized_for(model, model.config.max_len, 2))

    def reset(self) -> None:
        """Forget every turn (the system message stays)."""
        self.messages.clear()

    def conversation(self) -> list[dict]:
        """The messages as the template sees them: the system message first, if any."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.messages

    def prompt_ids(self, room: int) -> list[int]:
        """The conversation's prompt ids, dropping the oldest turns until ``room`` tokens are left for the
        reply; a last message that alone leaves no room is a ValueError (it is taken back, the rest kept)."""
        limit = self.generator.model.config.max_len - room
        alone = self.generator.chat_ids(self.conversation()[:1 if self.system else 0] + self.messages[-1:], self.tools)
        if len(alone) > limit:
            self.messages.pop()
            raise ValueError(f"message: {len(alone)} tokens with the template, and the reply needs {room} of the "
                             f"model's {self.generator.model.config.max_len}; send a shorter one")
        ids = self.generator.chat_ids(self.conversation(), self.tools)
        while len(ids) > limit:
            del self.messages[0]
            self.dropped += 1
            ids = self.generator.chat_ids(self.conversation(), self.tools)
        return ids

    def reply(self, text: str | None, on_text: Callable[[str], None] | None = None, **options) -> str:
        """The model's answer to ``text`` (None: to the conversation as it is, after tool results; decoding
        ``options`` by field name over the generator's own); ``on_text`` gets each piece as it is generated. An
        interruption (Ctrl-C) keeps what came so far."""
        if text is not None:
            self.messages.append({"role": "user", "content": text})
        decoding = self.generator.decoding.replace(**{**options, "num_return_sequences": 1})
        ids = self.prompt_ids(decoding.max_new_tokens or TEXT_MAX_NEW_TOKENS)
        pieces: list[str] = []

        def keep(sample: int, piece: str) -> None:
            pieces.append(piece)
            if on_text is not None:
                on_text(piece)

        try:
            answer = self.generator.generate(ids, decoding=decoding, on_text=keep)[0]
        except KeyboardInterrupt:
            self.messages.append({"role": "assistant", "content": "".join(pieces)})
            raise
        self.messages.append({"role": "assistant", "content": answer})
        return answer
