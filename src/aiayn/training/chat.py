"""Fine-tuning a chat model on conversations (``--task chat``): a JSON-lines file, one ``{"messages": [{"role",
"content"}, ...]}`` a line (what people fine-tune instruct models on), each conversation rendered by the
model's own chat template and trained with the loss on the assistant's turns only (their end-of-turn token
included, so the model learns to stop), never on the user's or the system's text."""

from __future__ import annotations

import json
from pathlib import Path

from torch import Tensor, nn

from aiayn.data.batching import pad_batch, token_batches
from aiayn.model.config import ModelConfig
from aiayn.tokenizers import TokenizerPair
from aiayn.training.tasks import summed_loss

ROLES = ("system", "user", "assistant", "tool")


def read_conversations(path: str | Path) -> list[str]:
    """The file's conversations, one JSON text each; a line that is not one is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; give a JSON-lines file of {{\"messages\": [...]}}")
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            conversation_messages(line, f"{path}:{number}")
            lines.append(line)
    if not lines:
        raise ValueError(f"{path}: no conversations")
    return lines


def conversation_messages(line: str, where: str) -> list[dict]:
    """The messages of one JSON line, checked: roles known, contents text, at least one assistant turn."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: expected {{\"messages\": [{{\"role\", \"content\"}}, ...]}}")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"{where}: each message needs a role ({', '.join(ROLES)}) and a text content")
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError(f"{where}: no assistant message: nothing to learn from")
    return messages


def assistant_labelled(tokenizers, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """The conversation's ids as its template renders it, and which of them the assistant wrote.

    The template renders each growing prefix of the conversation; the text an assistant message adds (its
    content and end-of-turn) is the assistant's, the text before it (the turn's header too) is not. Each piece
    is encoded alone, the template writing its own special tokens."""
    pieces, done = [], ""
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            before = tokenizers.apply_chat_template(messages[:i], add_generation_prompt=True)
            pieces.append((_after(before, done), False))
            done = before
        text = tokenizers.apply_chat_template(messages[: i + 1], add_generation_prompt=False)
        pieces.append((_after(text, done), m["role"] == "assistant"))
        done = text
    ids, own = [], []
    for text, assistant in pieces:
        new = tokenizers.src.encode(text, add_special_tokens=False) if text else []
        ids += new
        own += [assistant] * len(new)
    return ids, own


def _after(text: str, prefix: str) -> str:
    if not text.startswith(prefix):
        raise ValueError("chat template: it does not render a conversation as a growing prefix; --task chat needs "
                         "one that does")
    return text[len(prefix):]


class ChatTask:
    """Conversations as next-token examples: labels are the assistant's tokens (the rest is padding, which takes
    no loss); a conversation longer than ``max_len`` tokens is left out (and counted)."""

    def __init__(self, lines: list[str], tokenizers: TokenizerPair, cfg: ModelConfig, max_len: int,
                 max_tokens: int, seed: int) -> None:
        if getattr(tokenizers, "chat_template", None) is None:
            raise ValueError("task chat: the checkpoint has no chat template (an imported instruct model has one)")
        self.cfg, self.max_tokens, self.seed = cfg, max_tokens, seed
        self.examples, self.too_long = [], 0
        for line in lines:
            ids, own = assistant_labelled(tokenizers, conversation_messages(line, "conversation"))
            if len(ids) > max_len:
                self.too_long += 1
                continue
            self.examples.append((ids, [t if mine else cfg.pad_id for t, mine in zip(ids, own, strict=True)]))
        if not self.examples:
            raise ValueError(f"task chat: every conversation is longer than max_len {max_len} tokens")

    def __len__(self) -> int:
        return len(self.examples)

    def batches(self, epoch: int) -> list[list[int]]:
        lengths = [len(ids) for ids, _ in self.examples]
        return token_batches(lengths, lengths, self.max_tokens, self.seed, epoch)

    def collate(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        rows = [self.examples[i] for i in indices]
        return pad_batch([ids for ids, _ in rows], self.cfg.pad_id), pad_batch([lab for _, lab in rows],
                                                                              self.cfg.pad_id)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor], smoothing: float) -> tuple[Tensor, int]:
        ids, labels = batch  # (B, T) each
        return summed_loss(model(ids[:, :-1]), labels[:, 1:], self.cfg.pad_id, smoothing, self.cfg.padding_row)
