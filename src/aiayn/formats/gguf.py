"""GGUF (llama.cpp's one-file format, also Ollama's, LM Studio's and GPT4All's) -> aiayn's decoder-only model.

The file's metadata becomes the Hugging Face config its family's importer already reads (the architecture's
hyper-parameters under ``{arch}.*``, read as its record in ``gguf_arch.py`` says), its tensors are dequantized to
float32 one at a time with the ``gguf`` package's own dequantizer and renamed to Hugging Face's names, and its
tokenizer metadata becomes a ``tokenizer.json`` (``gguf_vocab``). llama.cpp rotates a ``llama`` model's queries and
keys as interleaved pairs, so its converter permuted their rows out of Hugging Face's halves layout: reading undoes
that (``unpermute``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats import gpt2, llama, phi3
from aiayn.formats.families import ARCHITECTURES, GGUF_ARCHITECTURES
from aiayn.formats.gguf_arch import GGUFArch, hf_name
from aiayn.formats.gguf_rows import GGUFRows, gguf_package
from aiayn.formats.gguf_vocab import tokenizer_from_gguf
from aiayn.io.files import give_back_memory
from aiayn.model.init import uninitialised
from aiayn.tokenizers.hf import HFTokenizers

MAGIC = b"GGUF"
SAMPLING = {"general.sampling.temp": "temperature", "general.sampling.top_k": "top_k",
            "general.sampling.top_p": "top_p", "general.sampling.min_p": "min_p",
            "general.sampling.penalty_repeat": "repetition_penalty"}


def _number(value):
    """A GGUF number as JSON keeps it: whole numbers as they are, float32 ones to the digits they hold (0.8, not
    0.800000011920929)."""
    return value if isinstance(value, int) else float(f"{float(value):.7g}")


def permute(w: Tensor, heads: int) -> Tensor:
    """Hugging Face's halves layout -> llama.cpp's interleaved pairs: each head's rows (2, D/2) become (D/2, 2)."""
    return w.reshape(heads, 2, w.size(0) // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def unpermute(w: Tensor, heads: int) -> Tensor:
    """llama.cpp's interleaved pairs -> Hugging Face's halves layout (``permute`` undone)."""
    return w.reshape(heads, w.size(0) // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


class GGUFFile:
    """A GGUF file opened for reading: ``meta`` (key -> value), ``arch`` (its name) and ``record`` (what aiayn
    knows of it: ``formats/gguf_arch.py``), and its tensors as float32."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            if f.read(4) != MAGIC:
                raise ValueError(f"{self.path}: not a GGUF file (it does not start with 'GGUF'); give a .gguf file "
                                 "or a Hugging Face model folder")
        try:
            reader = gguf_package().GGUFReader(self.path)
            self.meta = {key: field.contents() for key, field in reader.fields.items()}
        except Exception as err:  # the reader's errors on a cut or damaged file carry no file name
            raise ValueError(f"{self.path}: truncated or damaged GGUF file ({type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else 'no detail'})") from None
        self.arch = self.meta.get("general.architecture")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"{self.path}: architecture {self.arch!r} is not read; aiayn reads "
                             f"{', '.join(ARCHITECTURES)} GGUF files")
        self.record: GGUFArch = GGUF_ARCHITECTURES[self.arch]
        self.tensors = {t.name: t for t in reader.tensors}  # (views of the mapped file)
        del reader  # its parsed fields (520 MB for Gemma 3's 262,144 tokens) let go: the metadata is in self.meta
        give_back_memory()

    def get(self, key: str, default=None):
        """``{arch}.key`` of the metadata."""
        return self.meta.get(f"{self.arch}.{key}", default)

    def need(self, key: str):
        value = self.get(key)
        if value is None:
            raise ValueError(f"{self.path}: metadata {self.arch}.{key} is missing")
        return value

    def rows(self, name: str, order: Tensor | None = None) -> GGUFRows:
        """One tensor, read a slice of rows at a time (``order``: the file's row of each row)."""
        return GGUFRows(self.tensors[name], self.path, order)

    def tensor(self, name: str) -> Tensor:
        """One tensor, dequantized to float32, in PyTorch's shape (GGUF lists dimensions innermost first)."""
        return self.rows(name)[:]


def hf_config(f: GGUFFile) -> dict:
    """The Hugging Face ``config.json`` (as a dict) that the file's metadata describes (its architecture's record
    reads what only it has)."""
    if "token_embd.weight" not in f.tensors:
        raise ValueError(f"{f.path}: tensor token_embd.weight is missing")
    vocab = int(f.tensors["token_embd.weight"].shape[1])
    ends = [e for e in (f.meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")) if e is not None]
    bos = f.meta.get("tokenizer.ggml.bos_token_id")
    common = dict(model_type=f.arch, vocab_size=vocab, eos_token_id=ends,
                  bos_token_id=None if bos in ends else bos)  # GPT-2's <|endoftext|> ends; it starts nothing
    return f.record.config(f, common)


def hf_tensors(f: GGUFFile, hf: dict, rows: bool = False) -> Iterator[tuple[str, Tensor | GGUFRows]]:
    """Every tensor as (Hugging Face name, float32 tensor), one at a time: a ``llama`` file's q/k rows unpermuted,
    GPT-2's projections back in its Conv1D (in, out) layout. ``rows``: each matrix as its :class:`GGUFRows`
    instead, unread (the others read)."""
    held: dict[tuple[str, str], Tensor] = {}  # a layer's experts' gate or up matrices, until both are read
    for name in f.tensors:
        if name == "rope_freqs.weight":
            continue  # read into the config (hf_config)
        theirs = hf_name(name, f.record)
        if theirs is None:
            raise ValueError(f"{f.path}: tensor {name} has no place in aiayn's {f.arch} model")
        if f.record.output_copy and theirs == "lm_head.weight":
            continue  # GPT-2's output is its token table (llama.cpp writes a copy)
        part = name.split(".")[2] if name.startswith("blk.") else None
        order = None
        if f.record.interleaved and part in ("attn_q", "attn_k"):
            heads = hf["num_attention_heads"] if part == "attn_q" else hf["num_key_value_heads"]
            order = unpermute(torch.arange(int(f.tensors[name].shape[-1])), heads)  # the file's row of each row
        if rows and len(f.tensors[name].shape) == 2 and not theirs.endswith(f.record.transposed):
            yield theirs, f.rows(name, order)
            continue
        t = f.rows(name, order)[:]
        if theirs.endswith(f.record.transposed):
            t = t.t()
        if theirs.endswith(("experts.gate.weight", "experts.up.weight")):  # stacked as aiayn's gate_up (E, 2F, D)
            stem, part, _ = theirs.rsplit(".", 2)
            held[stem, part] = t
            if (stem, "gate") in held and (stem, "up") in held:
                yield f"{stem}.gate_up_proj", torch.cat([held.pop((stem, "gate")), held.pop((stem, "up"))], dim=1)
            continue
        if theirs.endswith("experts.down_proj.weight"):
            theirs = theirs.removesuffix(".weight")
        yield theirs, t


def read_gguf(path: str | Path, rows: bool = False):
    """(model, tokenizers, decoding defaults or None) of a GGUF file; every mistake is a ValueError naming it.
    ``rows``: a llama, qwen or gemma file's matrices left unread, each its weight's deferred rows
    (``io/rows.py::defer_rows``: a :class:`GGUFRows`), for a converter that reads rows as it quantizes
    (``aiayn.inference.load``), the model built uninitialised."""
    f = GGUFFile(path)
    tokenizers = _tokenizers(f)
    give_back_memory()  # the tokenizer's parse, given back before the weights come (as load_checkpoint does)
    hf = hf_config(f)
    if len(tokenizers.src) > hf["vocab_size"]:
        raise ValueError(f"{f.path}: {len(tokenizers.src)} tokens, more than token_embd.weight's "
                         f"{hf['vocab_size']} rows")
    try:
        byte_level = f.meta.get("tokenizer.ggml.model") == "gpt2"  # a byte-level vocabulary has no unknown token
        config = f.record.model_config(hf, None if byte_level else tokenizers.src.unk_id())
        model = _model(f, hf, config, lazy=rows and not config.n_experts and not f.record.fused)
    except ValueError as err:
        raise ValueError(f"{f.path}: {str(err).removeprefix('config.json: ')}") from None
    sampling = {ours: _number(f.meta[key]) for key, ours in SAMPLING.items() if key in f.meta}
    return model.eval(), tokenizers, sampling or None


def _tokenizers(f: GGUFFile) -> HFTokenizers:
    """The tokenizers the file's metadata makes (``gguf_vocab``); a damaged one is a ValueError naming the file."""
    try:
        json_text, settings = tokenizer_from_gguf(f.meta, str(f.path))
        return HFTokenizers(json_text, json.dumps(settings, indent=2))
    except ValueError:
        raise
    except Exception as err:  # tokenizers' own errors (a merge of tokens the vocabulary lacks) name no file
        raise ValueError(f"{f.path}: its tokenizer metadata (tokenizer.ggml.*) does not make a tokenizer "
                         f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); the file is damaged"
                         ) from None


def _model(f: GGUFFile, hf: dict, config, lazy: bool):
    """aiayn's model of ``config`` holding the file's tensors (``lazy``: its matrices left unread, the model built
    uninitialised)."""
    if not f.record.rotary:  # GPT-2's learned positions: its own loader
        return gpt2.gpt2_model(config, dict(hf_tensors(f, hf)))
    with uninitialised() if lazy else contextlib.nullcontext():
        model = llama.DecoderOnly(config)
    tensors = hf_tensors(f, hf, lazy)
    llama.load_llama_weights(model, phi3.split_fused(tensors, config) if f.record.fused else tensors,
                             source="the metadata")
    return model
