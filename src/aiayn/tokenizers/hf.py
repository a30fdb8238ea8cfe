"""Tokenizers of imported checkpoints, through the Hugging Face ``tokenizers`` library: one ``tokenizer.json``
(GPT-2's and Llama-3's byte-level BPE, BERT's WordPiece, Llama-2's SentencePiece-style BPE), or GPT-2's
older ``vocab.json`` + ``merges.txt``. Ids equal the Hugging Face tokenizer's. ``tokenizer_config.json``
travels with it: its special tokens and the chat template (a Jinja2 template over ``messages``), rendered in
a sandbox as ``transformers``' ``apply_chat_template`` does."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizerModel

from aiayn.tokenizers.base import Tokenizer, TokenizerPair

FILE = "tokenizer.json"
CONFIG = "tokenizer_config.json"
TEMPLATE = "chat_template.jinja"
GPT2_FILES = ("vocab.json", "merges.txt")
GPT2_END = "<|endoftext|>"


class HFTokenizer(Tokenizer):
    """``encode(text) -> ids`` as the Hugging Face tokenizer gives them (BERT's [CLS] ... [SEP] included),
    ``decode(ids)`` without special tokens. Ids past the tokenizer's vocabulary (a padding row aiayn
    appended) are dropped."""

    def __init__(self, json_text: str) -> None:
        self.tok = HFTokenizerModel.from_str(json_text)
        self.tok.no_padding()  # aiayn pads and cuts to the model's own lengths, whatever the file says
        self.tok.no_truncation()
        self.proto = json_text.encode()  # identity, for draft checks
        self.size = self.tok.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids as the tokenizer gives them; ``add_special_tokens=False``: without the BOS (BERT's [CLS] ... [SEP])
        its post-processor adds, for text that writes them itself (a rendered chat template)."""
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        if dropout:
            return super().encode_batch(texts, dropout)  # the refusal: tokenizer.json fixes its own dropout
        return [e.ids for e in self.tok.encode_batch(texts)]

    def encode_masked(self, text: str) -> list[int]:
        """Ids of a text with ``<mask>`` words: each becomes the tokenizer's mask token (BERT's [MASK])."""
        mask = next((t for t in ("[MASK]", "<mask>") if self.tok.token_to_id(t) is not None), None)
        if mask is None:
            raise ValueError("tokenizer.json: no mask token ([MASK] or <mask>); this tokenizer cannot fill masks")
        return self.encode(text.replace("<mask>", mask))

    def special_ids(self) -> list[int]:
        """The ids of the tokenizer's special tokens ([CLS], [SEP], [PAD], [MASK], ...)."""
        return [i for i, token in self.tok.get_added_tokens_decoder().items() if token.special]

    def token_text(self, token_id: int) -> str:
        return self.tok.decode([token_id])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([i for i in ids if i < self.size], skip_special_tokens=True)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.tok.id_to_token(i) if i < self.size else "<pad>" for i in ids]

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def newline_ids(self) -> list[int]:
        """"\n" as the tokenizer writes it (byte-level BPE has a piece for it; a word-level vocabulary none)."""
        return self.tok.encode("\n", add_special_tokens=False).ids

    def unk_id(self) -> int | None:
        """The id of the model's unknown token (None: a byte-level vocabulary has none)."""
        unk = getattr(self.tok.model, "unk_token", None)
        return None if unk is None else self.tok.token_to_id(unk)


class HFTokenizers(TokenizerPair):
    """One ``tokenizer.json`` for both sides (decoder-only and encoder-only models have one side), and the
    folder's ``tokenizer_config.json`` (special tokens, chat template) and ``chat_template.jinja`` (where
    transformers 5 writes the template) when it has them."""

    def __init__(self, json_text: str, config_text: str | None = None, template: str | None = None) -> None:
        super().__init__(HFTokenizer(json_text))
        self.config_text, self.template_text = config_text, template
        self.config = json.loads(config_text) if config_text else {}

    @classmethod
    def load(cls, folder: str | Path) -> HFTokenizers:
        folder = Path(folder)
        path = folder / FILE
        config = _read_config(folder / CONFIG)
        template = (folder / TEMPLATE).read_text(encoding="utf-8") if (folder / TEMPLATE).is_file() else None
        if not path.is_file() and all((folder / name).is_file() for name in GPT2_FILES):
            return cls(gpt2_tokenizer_json(folder), config, template)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; save the tokenizer with a fast (tokenizers) tokenizer's "
                                    "save_pretrained to get it")
        try:
            return cls(path.read_text(encoding="utf-8"), config, template)
        except Exception as err:  # the library's parse errors carry no file name
            raise ValueError(f"{path}: not a tokenizers file ({str(err).splitlines()[0]})") from None

    def files(self) -> dict[str, bytes]:
        extra = {name: text.encode() for name, text in ((CONFIG, self.config_text), (TEMPLATE, self.template_text))
                 if text is not None}
        return {FILE: self.src.proto, **extra}

    @property
    def chat_template(self) -> str | None:
        """The Jinja2 chat template (``chat_template.jinja`` or ``tokenizer_config.json``'s; None: none)."""
        template = self.template_text or self.config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        return template

    def special_token(self, name: str) -> str | None:
        """``bos_token``, ``eos_token``, ... of ``tokenizer_config.json`` as text (None: not set)."""
        value = self.config.get(name)
        return value.get("content") if isinstance(value, dict) else value

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, variables: dict | None = None) -> str:
        """The prompt text of a conversation (and the ``tools`` it may call, OpenAI's function specs), rendered by
        the model's chat template in a Jinja2 sandbox as ``transformers`` renders it (its ``tojson``);
        ``variables``: more of the template's variables (Qwen3's ``enable_thinking``)."""
        from jinja2 import TemplateError

        if self.chat_template is None:
            raise ValueError(f"{CONFIG}: this model has no chat_template; send a plain prompt")
        variables = variables or {}
        taken = {"messages", "add_generation_prompt", "tools"} & set(variables)
        if taken:
            raise ValueError(f"chat template: {', '.join(sorted(taken))} come from the request itself, not from more "
                             "variables")
        try:
            return _template(self.chat_template).render(
                **{name: self.special_token(name) for name in ("bos_token", "eos_token", "pad_token", "unk_token")},
                **variables, messages=messages, add_generation_prompt=add_generation_prompt, tools=tools)
        except TemplateError as err:
            raise ValueError(f"chat template: {err}") from None

    @property
    def takes_tools(self) -> bool:
        """Whether the chat template reads ``tools`` (Qwen2.5's, Hermes-style and Llama 3.1's do)."""
        from jinja2 import meta

        return self.chat_template is not None and \
            "tools" in meta.find_undeclared_variables(_environment().parse(self.chat_template))


@functools.lru_cache(maxsize=8)
def _template(source: str):
    """A chat template compiled once (compiling one took ~4 ms of every chat request)."""
    return _environment().from_string(source)


def _environment():
    """The sandbox chat templates render in: ``raise_exception`` and ``tojson`` as ``transformers`` gives them."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = tojson
    return env


def _read_config(path: Path) -> str | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    try:
        if not isinstance(json.loads(text), dict):
            raise ValueError
    except ValueError:
        raise ValueError(f"{path}: not a JSON object of tokenizer settings") from None
    return text


def gpt2_tokenizer_json(folder: Path) -> str:
    """GPT-2's byte-level BPE from its ``vocab.json`` + ``merges.txt`` as one ``tokenizer.json`` text."""
    vocab, merges = (str(folder / name) for name in GPT2_FILES)
    try:
        tok = HFTokenizerModel(models.BPE.from_file(vocab, merges))
    except Exception as err:  # the library's parse errors carry no file name
        raise ValueError(f"{folder}: vocab.json / merges.txt are not a byte-level BPE ({err})") from None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if tok.token_to_id(GPT2_END) is not None:
        tok.add_special_tokens([AddedToken(GPT2_END, special=True)])
    return tok.to_str()
