"""Text in, text out for a decoder-only (GPT-style) model: continue a prompt, streaming the text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from aiayn.decoding import generate
from aiayn.inference.load import load_checkpoint
from aiayn.inference.precision import inference_copy
from aiayn.model.transformer import DecoderOnly
from aiayn.tokenizers import TokenizerPair


class TextStream:
    """Turns ids arriving one at a time into the text they add. A character split into several byte
    pieces is held back until it is whole (its partial decoding ends in U+FFFD)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def add(self, token: int) -> str:
        """The new text that ``token`` completes ("" while a character is incomplete)."""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd") or not text.startswith(self.shown):
            return ""
        new, self.shown = text[len(self.shown):], text
        return new


class TextGenerator:
    """Continue prompts with a decoder-only checkpoint (greedy with temperature 0, else sampling)."""

    def __init__(self, model: DecoderOnly, tokenizers: TokenizerPair, device: torch.device | str = "cpu",
                 bf16: bool = False) -> None:
        if model.config.arch != "decoder-only":
            raise ValueError(f"text generation needs a decoder-only checkpoint, not {model.config.arch}")
        self.model = inference_copy(model, device, bf16=bf16)
        self.tokenizer, self.device = tokenizers.src, torch.device(device)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", **options) -> TextGenerator:
        model, tokenizers = load_checkpoint(path, "decoder-only")
        return cls(model, tokenizers, device, **options)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's ids; an empty prompt starts a new document (EOS, which separates documents in
        training), and a long one keeps its last max_len - 1 tokens (room to continue)."""
        ids = self.tokenizer.encode(prompt) or [self.model.config.eos_id]
        return ids[-(self.model.config.max_len - 1):]

    def generate(self, prompt: str, max_new_tokens: int = 200, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, num_samples: int = 1,
                 on_text: Callable[[int, str], None] | None = None) -> list[str]:
        """``num_samples`` continuations of ``prompt`` (without the prompt). ``on_text(sample, text)`` gets each
        piece of text as soon as it is generated."""
        cfg = self.model.config
        if temperature == 0 and num_samples > 1:
            raise ValueError("num_samples: greedy decoding (temperature 0) gives one continuation")
        ids = torch.tensor([self.prompt_ids(prompt)], device=self.device)  # (1, T)
        room = cfg.max_len - ids.size(1) if cfg.positions == "learned" else max_new_tokens
        streams = [TextStream(self.tokenizer) for _ in range(num_samples)]

        def on_token(next_ids: torch.Tensor, live: torch.Tensor) -> None:
            for i, (tok, alive) in enumerate(zip(next_ids.tolist(), live.tolist(), strict=True)):
                if alive and tok != cfg.eos_id and (text := streams[i].add(tok)):
                    on_text(i, text)

        strategy = "greedy" if temperature == 0 else "sample"
        out = generate(self.model, ids, strategy, max_new_tokens=min(max_new_tokens, room),
                       temperature=temperature or 1.0, top_k=top_k, top_p=top_p, seed=seed,
                       num_return_sequences=num_samples if strategy == "sample" else 1,
                       on_token=on_token if on_text is not None else None)
        return [self.tokenizer.decode(row) for row in out]
