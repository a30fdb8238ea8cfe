"""GGUF (llama.cpp's one-file format, also Ollama's, LM Studio's and GPT4All's) -> aiayn's decoder-only model.

The file's metadata becomes the Hugging Face config the ``llama`` and ``gpt2`` importers already read (the
architecture's hyper-parameters under ``{arch}.*``), its tensors are dequantized to float32 one at a time with the
``gguf`` package's own dequantizer and renamed to Hugging Face's names, and its tokenizer metadata becomes a
``tokenizer.json`` (``gguf_vocab``). llama.cpp rotates a ``llama`` model's queries and keys as interleaved pairs,
so its converter permuted their rows out of Hugging Face's halves layout: reading undoes that (``unpermute``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats import gemma, gpt2, llama, moe, phi3
from aiayn.formats.families import ARCHITECTURES
from aiayn.formats.gguf_rows import GGUFRows, gguf_package
from aiayn.formats.gguf_vocab import tokenizer_from_gguf
from aiayn.io.files import give_back_memory
from aiayn.model.init import uninitialised
from aiayn.tokenizers.hf import HFTokenizers

MAGIC = b"GGUF"
LLAMA_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate_inp": "mlp.gate",
               "ffn_gate_exps": "mlp.experts.gate", "ffn_up_exps": "mlp.experts.up",  # a mixture's router and its
               "ffn_down_exps": "mlp.experts.down_proj"}  # experts, (E, F, D) and (E, D, F)
LLAMA_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
PHI3_NAMES = {**LLAMA_NAMES, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}  # Phi's fused ones
GEMMA_NAMES = {**LLAMA_NAMES, "ffn_norm": "pre_feedforward_layernorm",  # Gemma's sandwich norms
               "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
GEMMA_LOCAL_BASE, GEMMA_PATTERN = 10_000.0, 6  # what llama.cpp fixes for gemma3: the sliding layers' rotary base,
# and every sixth layer full
GPT2_NAMES = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
GPT2_TOP = {"token_embd": "transformer.wte", "position_embd": "transformer.wpe", "output_norm": "transformer.ln_f",
            "output": "lm_head"}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")  # GPT-2's (in, out)
SAMPLING = {"general.sampling.temp": "temperature", "general.sampling.top_k": "top_k",
            "general.sampling.top_p": "top_p", "general.sampling.min_p": "min_p",
            "general.sampling.penalty_repeat": "repetition_penalty"}


def _number(value):
    """A GGUF number as JSON keeps it: whole numbers as they are, float32 ones to the digits they hold (0.8, not
    0.800000011920929)."""
    return value if isinstance(value, int) else float(f"{float(value):.7g}")


def hf_name(name: str, arch: str) -> str | None:
    """Hugging Face's name of a GGUF tensor name (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``); None: a name aiayn has no place for."""
    parts = name.split(".")
    top, layer = _tables(arch)
    if len(parts) == 2 and parts[0] in top:
        return f"{top[parts[0]]}.{parts[1]}"
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in layer:
        block = f"transformer.h.{parts[1]}" if arch == "gpt2" else f"model.layers.{parts[1]}"
        return f"{block}.{layer[parts[2]]}.{parts[3]}"
    return None


def gguf_name(hf: str, arch: str) -> str:
    """The GGUF name of a Hugging Face tensor name (``hf_name`` backwards)."""
    top, layer = _tables(arch)
    for theirs, ours in top.items():
        if hf.rsplit(".", 1)[0] == ours:
            return f"{theirs}.{hf.rsplit('.', 1)[1]}"
    _, _, index, rest = hf.split(".", 3)  # transformer.h.I.rest / model.layers.I.rest
    for theirs, ours in layer.items():
        if rest.rsplit(".", 1)[0] == ours:
            return f"blk.{index}.{theirs}.{rest.rsplit('.', 1)[1]}"
    raise ValueError(f"{hf}: no GGUF name")


def _tables(arch: str) -> tuple[dict[str, str], dict[str, str]]:
    """(top-level, per-layer) GGUF -> Hugging Face names of an architecture."""
    if arch == "gpt2":
        return GPT2_TOP, GPT2_NAMES
    return LLAMA_TOP, {"gemma3": GEMMA_NAMES, "gemma2": GEMMA_NAMES, "phi3": PHI3_NAMES}.get(arch, LLAMA_NAMES)


def permute(w: Tensor, heads: int) -> Tensor:
    """Hugging Face's halves layout -> llama.cpp's interleaved pairs: each head's rows (2, D/2) become (D/2, 2)."""
    return w.reshape(heads, 2, w.size(0) // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def unpermute(w: Tensor, heads: int) -> Tensor:
    """llama.cpp's interleaved pairs -> Hugging Face's halves layout (``permute`` undone)."""
    return w.reshape(heads, w.size(0) // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


class GGUFFile:
    """A GGUF file opened for reading: ``meta`` (key -> value), ``arch``, and its tensors as float32."""

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
    """The Hugging Face ``config.json`` (as a dict) that the file's metadata describes."""
    if "token_embd.weight" not in f.tensors:
        raise ValueError(f"{f.path}: tensor token_embd.weight is missing")
    vocab = int(f.tensors["token_embd.weight"].shape[1])
    ends = [e for e in (f.meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")) if e is not None]
    bos = f.meta.get("tokenizer.ggml.bos_token_id")
    common = dict(model_type=f.arch, vocab_size=vocab, eos_token_id=ends,
                  bos_token_id=None if bos in ends else bos)  # GPT-2's <|endoftext|> ends; it starts nothing
    if f.arch == "gpt2":
        d = f.need("embedding_length")
        return dict(common, n_embd=d, n_layer=f.need("block_count"), n_head=f.need("attention.head_count"),
                    n_inner=f.get("feed_forward_length", 4 * d), n_positions=f.need("context_length"),
                    layer_norm_epsilon=f.get("attention.layer_norm_epsilon", 1e-5), activation_function="gelu_new",
                    eos_token_id=common["eos_token_id"][0] if common["eos_token_id"] else None, resid_pdrop=0.0)
    if f.arch in ("gemma3", "gemma2"):
        return _gemma_config(f, common)
    if f.arch == "phi3":  # partial rotary positions: the rotated share of each head
        head = f.get("attention.key_length", f.need("embedding_length") // f.need("attention.head_count"))
        common = dict(common, model_type="phi3", sliding_window=f.get("attention.sliding_window"),
                      partial_rotary_factor=f.get("rope.dimension_count", head) / head)
    if f.arch == "qwen3moe":  # llama.cpp's qwen3moe renormalises the chosen experts' weights
        common = dict(common, model_type="qwen3_moe", num_experts=f.need("expert_count"),
                      num_experts_per_tok=f.need("expert_used_count"),
                      moe_intermediate_size=f.need("expert_feed_forward_length"), norm_topk_prob=True)
    elif f.arch == "llama" and f.get("expert_count"):  # a llama file with experts: Mixtral's
        common = dict(common, model_type="mixtral", num_local_experts=f.get("expert_count"),
                      num_experts_per_tok=f.need("expert_used_count"))
    heads = f.need("attention.head_count")
    scaling = f.get("rope.scaling.type")
    rope = {"rope_type": "linear", "factor": f.need("rope.scaling.factor")} if scaling == "linear" else (
        None if scaling in (None, "none") else {"rope_type": scaling})
    if "rope_freqs.weight" in f.tensors:  # Llama 3.1's scaled frequencies: a divisor of each
        rope = {"rope_type": "factors", "factors": f.tensor("rope_freqs.weight").tolist()}
    return dict(common, hidden_size=f.need("embedding_length"), intermediate_size=f.need("feed_forward_length"),
                num_hidden_layers=f.need("block_count"), num_attention_heads=heads,
                num_key_value_heads=f.get("attention.head_count_kv", heads), head_dim=f.get("attention.key_length"),
                rms_norm_eps=f.get("attention.layer_norm_rms_epsilon", 1e-6), rope_theta=f.get("rope.freq_base", 1e4),
                rope_scaling=rope, max_position_embeddings=f.get("context_length", 2048),
                tie_word_embeddings="output.weight" not in f.tensors,
                attention_bias=f.arch == "llama" and "blk.0.attn_output.bias" in f.tensors)


def _gemma_config(f: GGUFFile, common: dict) -> dict:
    """A Gemma 3 text (or Gemma 2) ``config.json`` (as a dict) from the metadata, with what llama.cpp fixes for
    gemma3 (the sliding layers' rotary base, every sixth layer full) and gemma2 (sliding and full layers
    alternating, one rotary base), and for both the query scale of the head size; its norm gains are stored as
    1 + w already."""
    head = f.need("attention.key_length")
    factor = f.get("rope.scaling.factor")
    pad = f.meta.get("tokenizer.ggml.padding_token_id", 0)
    theta, local = f.get("rope.freq_base", 1e6), GEMMA_LOCAL_BASE
    if f.arch == "gemma2":
        theta = local = f.get("rope.freq_base", 1e4)
        common = dict(common, model_type="gemma2", attn_logit_softcapping=f.get("attn_logit_softcapping") or None,
                      final_logit_softcapping=f.get("final_logit_softcapping") or None)  # 0: none
    return dict(common, model_type=common.get("model_type", "gemma3_text"), hidden_size=f.need("embedding_length"),
                intermediate_size=f.need("feed_forward_length"), num_hidden_layers=f.need("block_count"),
                num_attention_heads=f.need("attention.head_count"),
                num_key_value_heads=f.get("attention.head_count_kv", f.need("attention.head_count")), head_dim=head,
                query_pre_attn_scalar=head, rms_norm_eps=f.get("attention.layer_norm_rms_epsilon", 1e-6),
                rope_theta=theta, rope_local_base_freq=local,
                rope_scaling={"rope_type": "linear", "factor": factor} if factor not in (None, 1.0) else None,
                sliding_window=f.need("attention.sliding_window"), sliding_window_pattern=GEMMA_PATTERN,
                max_position_embeddings=f.get("context_length", 32768), pad_token_id=pad,
                tie_word_embeddings="output.weight" not in f.tensors, bos_token_id=f.meta.get(
                    "tokenizer.ggml.bos_token_id", 2))


def hf_tensors(f: GGUFFile, hf: dict, rows: bool = False) -> Iterator[tuple[str, Tensor | GGUFRows]]:
    """Every tensor as (Hugging Face name, float32 tensor), one at a time: a ``llama`` file's q/k rows unpermuted,
    GPT-2's projections back in its Conv1D (in, out) layout. ``rows``: each matrix as its :class:`GGUFRows`
    instead, unread (the others read)."""
    held: dict[tuple[str, str], Tensor] = {}  # a layer's experts' gate or up matrices, until both are read
    for name in f.tensors:
        if name == "rope_freqs.weight":
            continue  # read into the config (hf_config)
        theirs = hf_name(name, f.arch)
        if theirs is None:
            raise ValueError(f"{f.path}: tensor {name} has no place in aiayn's {f.arch} model")
        if f.arch == "gpt2" and theirs == "lm_head.weight":
            continue  # GPT-2's output is its token table (llama.cpp writes a copy)
        part = name.split(".")[2] if name.startswith("blk.") else None
        order = None
        if f.arch == "llama" and part in ("attn_q", "attn_k"):
            heads = hf["num_attention_heads"] if part == "attn_q" else hf["num_key_value_heads"]
            order = unpermute(torch.arange(int(f.tensors[name].shape[-1])), heads)  # the file's row of each row
        if rows and len(f.tensors[name].shape) == 2 and not theirs.endswith(CONV1D):
            yield theirs, f.rows(name, order)
            continue
        t = f.rows(name, order)[:]
        if theirs.endswith(CONV1D):
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
        if f.arch == "gpt2":
            model = gpt2.gpt2_model(gpt2.gpt2_config(hf), dict(hf_tensors(f, hf)))
        else:
            config = _llama_config(f, hf, tokenizers)
            lazy = rows and not config.n_experts and f.arch != "phi3"
            with uninitialised() if lazy else contextlib.nullcontext():
                model = llama.DecoderOnly(config)
            tensors = hf_tensors(f, hf, lazy)
            llama.load_llama_weights(model, phi3.split_fused(tensors, config) if f.arch == "phi3" else tensors,
                                     source="the metadata")
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


def _llama_config(f: GGUFFile, hf: dict, tokenizers: HFTokenizers):
    """The ModelConfig of a file of the LLaMA branch (a mixture, Gemma, Phi-3, Llama, Qwen)."""
    unk = tokenizers.src.unk_id()
    if hf["model_type"] in ("qwen3_moe", "mixtral"):
        return moe.moe_config(hf, unk)
    if f.arch in ("gemma3", "gemma2"):
        return gemma.gemma_config(hf, unk)
    if f.arch == "phi3":
        return phi3.phi3_config(hf, unk)
    byte_level = f.meta.get("tokenizer.ggml.model") == "gpt2"
    return llama.llama_config(hf, None if byte_level else unk)
