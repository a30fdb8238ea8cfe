"""Text in, text out for a decoder-only (GPT-style) model: continue a prompt, streaming the text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.constraint import Grammars
from aiayn.decoding.drafts import Draft
from aiayn.decoding.generation import generate
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.inference.draft import load_draft
from aiayn.inference.load import load_for_use
from aiayn.inference.precision import Precision, inference_copy
from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.kv_int8 import cache_dtype
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
    """Continue prompts with a decoder-only checkpoint: a :class:`DecodingConfig` (the checkpoint's
    ``generation.json`` with ``from_checkpoint``), resolved as everywhere (:meth:`DecodingConfig.resolve`:
    sampling unless it names a strategy or has temperature 0); its ``json_schema`` or ``grammar`` constrain the
    output (``self.grammars`` compiles each once)."""

    def __init__(self, model: DecoderOnly, tokenizers: TokenizerPair, device: torch.device | str = "cpu",
                 bf16: bool = False, decoding: DecodingConfig | None = None, int8: bool = False,
                 int4: bool = False, own: bool = False, prompt_cache: PromptCache | None = None,
                 draft: Draft | None = None, draft_tokens: int | None = None,
                 kv_cache_dtype: str | None = None) -> None:
        """``bf16``: weights, activations and the KV cache in bfloat16; ``int8``, ``int4``: weight-only int8 or
        int4 linear layers (CPU; ``aiayn.inference.precision.quantize``); ``own``: ``model`` is handed over and
        made the inference copy in place (else it is copied and left as it was); ``prompt_cache``: a
        :class:`~aiayn.decoding.prefix.PromptCache` over the inference copy (``self.model``), set after
        construction, reused by every :meth:`generate` of one sequence (the server's scheduler keeps its own);
        ``draft``: greedy decoding runs speculatively (the same text, fewer passes of the model:
        ``decoding/drafts.py``), ``draft_tokens`` a pass (None: adapted); ``self.speculative`` counts them;
        ``kv_cache_dtype``: ``int8`` keeps the KV cache as int8 (``model/kv_int8.py``), None the weights' dtype."""
        if model.config.arch != "decoder-only":
            raise ValueError(f"text generation needs a decoder-only checkpoint, not {model.config.arch}")
        self.model = inference_copy(model, device, int8=int8, bf16=bf16, int4=int4, own=own, few_rows=True)
        self.model.runtime.kv_cache_dtype = cache_dtype(kv_cache_dtype)
        self.tokenizers, self.tokenizer, self.device = tokenizers, tokenizers.src, torch.device(device)
        self.decoding = decoding or DecodingConfig()
        self.grammars = Grammars(self.tokenizer, model.config.end_ids)  # JSON schemas and grammars, compiled once
        # an imported model's template, if it has one
        self.template = getattr(tokenizers, "chat_template", None)  # its text (the tool-call format it teaches)
        self.chat_template = tokenizers.apply_chat_template if self.template else None
        self.takes_tools = bool(self.chat_template and tokenizers.takes_tools)
        self.prompt_cache = prompt_cache
        self.draft, self.draft_tokens, self.speculative = draft, draft_tokens, SpeculativeStats()

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None,
                    variables: dict | None = None) -> str:
        """The prompt text of a conversation (``[{"role", "content"}]``) and the ``tools`` it may call, by the
        model's chat template (``variables``: more of its variables, as Qwen3's ``enable_thinking``); a model without
        one (or without tools in it, when given some) is a ValueError."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template (an imported model's tokenizer_config.json brings "
                             "one); send a plain prompt")
        if tools and not self.takes_tools:
            raise ValueError("tools: this model's chat template takes no tools (Qwen2.5's and Hermes-style "
                             "templates do)")
        return self.chat_template(messages, tools=tools or None, variables=variables)

    def chat_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The ids of a conversation's prompt (:meth:`rendered_ids` of :meth:`chat_prompt`)."""
        return self.rendered_ids(self.chat_prompt(messages, tools))

    def rendered_ids(self, prompt: str) -> list[int]:
        """The ids of a prompt the chat template rendered: the template writes its special tokens itself, so the
        tokenizer adds none (no second BOS)."""
        return self.tokenizer.encode(prompt, add_special_tokens=False)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str = "cpu", prepare=None,
                        draft: str | None = None, **options) -> TextGenerator:
        """``path``: a checkpoint or run folder, or a GGUF file; ``prepare`` as in ``load_checkpoint`` (a LoRA
        adapter); decoding: the checkpoint's defaults (``load_for_use``); ``draft``: ``ngram``, ``int4``,
        ``int8`` or a checkpoint with the same tokenizer (``inference/draft.py``)."""
        precision = Precision(str(device), **{k: v for k, v in options.items() if k in ("int8", "int4", "bf16")},
                              few_rows=True)
        model, tokenizers, decoding = load_for_use(path, "decoder-only", prepare, precision.converter())
        chosen = load_draft(draft, path, tokenizers, "decoder-only", precision, prepare)
        return cls(model, tokenizers, device, decoding=decoding, own=True, draft=chosen, **options)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's ids; an empty prompt starts a new document (EOS, which separates documents in
        training), and a long one keeps its last max_len - 1 tokens (room to continue)."""
        ids = self.tokenizer.encode(prompt) or [self.model.config.eos_id]
        return ids[-(self.model.config.max_len - 1):]

    @torch.inference_mode()
    def prompt_logprobs(self, ids: list[int], top: int = 0) -> list[tuple[float | None, list[tuple[int, float]]]]:
        """Each prompt token's log-probability given the tokens before it, and the ``top`` likeliest tokens there
        (id, log-probability): what evaluation harnesses score a continuation by. The first token has no context:
        (None, [])."""
        logits = self.model.decode(torch.tensor([ids], device=self.device))[0, :-1].float()  # (T-1, V)
        logp = logits[:, : len(self.tokenizer)].log_softmax(-1)  # the tokenizer's rows (no appended padding row)
        taken = logp.gather(1, torch.tensor(ids[1:], device=logp.device)[:, None])[:, 0].tolist()  # (T-1,)
        best = logp.topk(top, dim=-1) if top else None
        alternatives = [[] for _ in taken] if best is None else [
            list(zip(i, v, strict=True)) for i, v in zip(best.indices.tolist(), best.values.tolist(), strict=True)]
        return [(None, []), *zip(taken, alternatives, strict=True)]

    def generate(self, prompt: str | list[int], max_new_tokens: int | None = None, *,
                 decoding: DecodingConfig | None = None, on_text: Callable[[int, str], None] | None = None,
                 **options) -> list[str]:
        """``num_return_sequences`` continuations of ``prompt`` (text, or its ids as they are: a rendered chat)
        without the prompt, decoded with ``decoding`` (default: this generator's) with ``max_new_tokens`` and
        ``options`` (its fields by name) replaced. ``on_text(sample, text)`` gets each piece of text as soon as it
        is generated."""
        cfg = self.model.config
        decoding = (decoding or self.decoding).replace(**options, **({} if max_new_tokens is None else
                                                                      {"max_new_tokens": max_new_tokens}))
        decoding = decoding.resolve(cfg)
        ids = torch.tensor([self.prompt_ids(prompt) if isinstance(prompt, str) else prompt], device=self.device)
        wanted = decoding.max_new_tokens
        room = cfg.max_len - ids.size(1) if cfg.positions == "learned" else wanted
        streams = [TextStream(self.tokenizer) for _ in range(decoding.num_return_sequences)]

        def on_token(next_ids: torch.Tensor, live: torch.Tensor) -> None:
            for i, (tok, alive) in enumerate(zip(next_ids.tolist(), live.tolist(), strict=True)):
                if alive and tok != cfg.eos_id and (text := streams[i].add(tok)):
                    on_text(i, text)

        out = generate(self.model, ids, config=decoding, max_new_tokens=min(wanted, room), grammars=self.grammars,
                       on_token=on_token if on_text is not None else None, prompt_cache=self.prompt_cache,
                       draft=self.draft, draft_tokens=self.draft_tokens, speculative_stats=self.speculative)
        return [self.tokenizer.decode(row) for row in out]
