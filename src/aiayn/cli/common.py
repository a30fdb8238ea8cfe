"""What the commands share: the user-error type, flag names, reading and writing lines, the decoding and corpus
flags."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


class UserError(Exception):
    """A mistake in the user's input: reported in one line, no traceback."""


GGUF_CHECKPOINT = ("checkpoint folder, run folder, or a .gguf file (llama.cpp's, run as it is: --int8 and --int4 keep "
                   "its Q8_0 and Q4_0 / Q4_1 / Q4_K blocks)")


def flag(name: str) -> str:
    """The command-line flag of a recipe field: max_steps -> --max-steps."""
    return "--" + name.replace("_", "-")


def read_input(path: str | None) -> list[str]:
    from aiayn.data.corpus import decode_lines, read_lines

    return read_lines(path) if path else decode_lines(sys.stdin.buffer, "<stdin>")


class _Examples(argparse.HelpFormatter):
    """argparse's help, with the examples of ``examples()`` kept line by line (the description still wrapped)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples(*commands: str) -> dict:
    """``add_parser`` keywords that end a command's --help with these example command lines
    (tests/cli/test_help.py parses each one)."""
    return {"epilog": "examples:\n" + "\n".join(f"  {command}" for command in commands), "formatter_class": _Examples}


def add_overwrite(p, what: str = "") -> None:
    """--overwrite: the one way to let a command replace a path aiayn did not write."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace the output even when it exists and aiayn did not write it" + (f" ({what})" if what
                                                                                               else ""))


def claim(path: str | None, by: str, args: argparse.Namespace, folder: bool = False,
          own_files: tuple[str, ...] = ()) -> None:
    """Refuse an output path the user owns, before any work (``aiayn.io.files.claim_output``)."""
    from aiayn.io.files import claim_output

    if path:
        claim_output(path, by, folder=folder, overwrite=args.overwrite, own_files=own_files)


def write_output(lines: list[str], path: str | None) -> None:
    """The lines to ``path`` (claimed beforehand with :func:`claim`), else to stdout."""
    from aiayn.io.files import atomic_write_text

    text = "".join(line + "\n" for line in lines)
    if path:
        atomic_write_text(Path(path), text)
    else:
        sys.stdout.write(text)


def warn_truncated(translator, where: str) -> None:
    if translator.truncated:
        lines = ", ".join(str(i + 1) for i in translator.truncated[:20]) + (" ..." if len(translator.truncated) > 20
                                                                           else "")
        print(f"aiayn: warning: {where}: {len(translator.truncated)} line(s) longer than the model's "
              f"{translator.model.config.max_len} source tokens were cut (lines {lines})", file=sys.stderr)


def add_precision(p) -> None:
    """--int8, --int4 and --bf16, for the commands that decode (translate, evaluate, generate, chat, serve)."""
    p.add_argument("--int8", action="store_true", help="int8 linear layers, one scale a weight row (CPU; bfloat16 "
                   "activations on a CPU with bfloat16 instructions, int8 ones, one scale a row, elsewhere); see "
                   "docs/decoding.md")
    p.add_argument("--int4", action="store_true", help="weight-only int4 linear layers, groups of 32 (CPU; the "
                   "smallest and fastest for one sequence at a time, some quality lost: docs/decoding.md)")
    p.add_argument("--bf16", action="store_true", help="decode in bfloat16 (about 2x faster on CPUs with bf16 "
                   "kernels; elsewhere emulated, slower for batches; small BLEU cost, see docs/decoding.md); "
                   "with --int8 or --int4, the rest of the model in bfloat16")
    p.add_argument("--kv-cache-dtype", choices=("auto", "int8"), default="auto", dest="kv_cache_dtype",
                   help="the KV cache's keys and values: auto (the weights' dtype) or int8 (one scale a group of 32 "
                   "values: 0.28x float32's bytes, a longer context in the same memory; steps eagerly; see "
                   "docs/decoding.md)")


def add_compile(p) -> None:
    """--compile, for the commands that decode a language model token by token (generate, chat, serve)."""
    p.add_argument("--compile", choices=("auto", "on", "off"), default=os.environ.get("AIAYN_COMPILE", "auto"),
                   help="the decoding step compiled once into one graph (torch.compile; cached per machine under "
                        "$AIAYN_CACHE/inductor): auto (default; $AIAYN_COMPILE sets another) compiles a model of "
                        "100M parameters or more with --int8 or --int4, where a C++ compiler is present, for a chat, "
                        "a server or a generation of 2,000 tokens or more; on: any language model; off: eager. See "
                        "docs/decoding.md")


def text_decoding_options(args: argparse.Namespace) -> dict:
    """:func:`decoding_options` of a command that continues text: with ``--draft`` and no ``--temperature`` or
    ``--strategy``, greedy (speculative decoding's output is then greedy's; given a temperature it samples)."""
    options = decoding_options(args)
    if args.draft not in (None, "none") and "temperature" not in options and "strategy" not in options:
        options["strategy"] = "greedy"
    return options


def precision_options(args: argparse.Namespace) -> dict:
    """The precision flags as the inference classes' keyword arguments."""
    return {"int8": args.int8, "int4": args.int4, "bf16": args.bf16,
            "kv_cache_dtype": None if args.kv_cache_dtype == "auto" else args.kv_cache_dtype}


def note_emulated_bf16(args: argparse.Namespace) -> None:
    """--bf16 on a CPU without bfloat16 instructions: say that it decodes converted or emulated, slower than float32 for
    batches (on an AVX2-only EPYC 0.28-0.39x at batch 16, 1.34x at batch 1: ``benchmarks/bench_engines.py``);
    the weights still take half the memory, which may be why it was asked for. With --int8 or --int4 only the
    layers around the quantized ones are in bfloat16: no note."""
    import torch

    from aiayn.model.cpu import native_bf16

    quantized = args.int8 or args.int4
    if args.bf16 and not quantized and torch.device(args.device).type == "cpu" and not native_bf16():
        print("aiayn: note: --bf16: this CPU has no bfloat16 instructions (AVX512-BF16, AMX or AVX-NE-CONVERT), so "
              "bfloat16 is converted or emulated: slower than float32 for batches of sentences (faster for one at a "
              "time); leave out --bf16 for speed (it halves the model's memory)", file=sys.stderr)


def translator_from_args(args: argparse.Namespace):
    from aiayn.inference.translator import Translator

    note_emulated_bf16(args)
    options = decoding_options(args)
    if args.draft not in (None, "none") and "beam_size" not in options:
        options["beam_size"] = 1  # speculative decoding is greedy
    return Translator.from_checkpoint(args.checkpoint, args.device, decoding=options, **precision_options(args),
                                      draft=args.draft, draft_tokens=args.draft_tokens, shortlist=args.shortlist,
                                      prepare=adapter_hook(args))


def add_field_flags(p, cls, skip: tuple[str, ...] = (), keep_defaults: bool = False) -> None:
    """One flag per field of the dataclass ``cls`` (mappings and ``skip`` left out): its help, type, choices
    and other names from the field's metadata. Without ``keep_defaults`` a flag left out is None, so only the
    flags given override what else decides (a recipe file, a checkpoint's generation.json); the help shows the
    field's default either way."""
    import dataclasses

    for f in dataclasses.fields(cls):
        kind = f.type.split(" |")[0]
        if f.name in skip or kind == "dict":
            continue
        text = f"{f.metadata['help']} (default: {f.default})".replace("%", "%%")
        names = (flag(f.name), *f.metadata.get("aliases", ()))
        value = f.default if keep_defaults else None
        if kind == "bool":
            p.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=value, help=text)
        else:
            kind_of = _file_text if f.metadata.get("file") else {"int": int, "float": float}.get(kind, str)
            p.add_argument(*names, dest=f.name, type=kind_of, default=value, metavar="FILE" if
                           f.metadata.get("file") else None, choices=f.metadata.get("choices"), help=text)


def _file_text(path: str) -> str:
    """A flag that names a file: its text (a missing or unreadable file is argparse's one-line error)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None


def add_decoding_options(p, skip: tuple[str, ...] = ()) -> None:
    """One flag per ``DecodingConfig`` field. Flags left out take the checkpoint's ``generation.json``, else
    the field's default."""
    from aiayn.decoding.config import DecodingConfig

    group = p.add_argument_group("decoding", "default: the checkpoint's generation.json (an imported language model's: "
                                 "its own files' sampling, else greedy, as Hugging Face's; llama.cpp samples with "
                                 "--temperature 0.8 --top-k 40 --top-p 0.95 --min-p 0.05), else the value shown")
    add_field_flags(group, DecodingConfig, skip)


def decoding_options(args: argparse.Namespace) -> dict:
    """The decoding flags given (field name -> value)."""
    from aiayn.decoding.config import names

    return {name: getattr(args, name) for name in names() if getattr(args, name, None) is not None}


def add_adapter(p) -> None:
    """--adapter: run the checkpoint with a LoRA adapter on it, unmerged (``aiayn merge`` folds one in)."""
    p.add_argument("--adapter", help="a LoRA adapter folder (PEFT's format: adapter_config.json + "
                   "adapter_model.safetensors) to run the checkpoint with, unmerged")


def add_tensor_parallel(p) -> None:
    """--tensor-parallel, for the commands that run a model under torchrun (translate, generate, embed, serve)."""
    p.add_argument("--tensor-parallel", action="store_true", dest="tensor_parallel",
                   help="split every attention and feed-forward block over the processes of torchrun "
                        "(torchrun --nproc-per-node N -m aiayn ...): each holds 1/N of their weights and KV cache; "
                        "rank 0 reads and writes (docs/scaling.md)")


def start_parallel(args: argparse.Namespace):
    """With --tensor-parallel: join torchrun's processes (``inference.tensor_parallel.start``) and keep this
    process's place as ``args.parallel``; else None."""
    args.parallel = None
    if getattr(args, "tensor_parallel", False):
        from aiayn.inference.tensor_parallel import start

        if getattr(args, "adapter", None) or getattr(args, "lora", None):
            raise UserError("--tensor-parallel splits plain weights: merge the adapter first (aiayn merge), then "
                            "split the merged checkpoint")
        args.parallel = start(args.device)
    return args.parallel


def leader_only(args: argparse.Namespace) -> bool:
    """Whether this process reads the input and writes the output: always, but under --tensor-parallel rank 0."""
    parallel = getattr(args, "parallel", None)
    return parallel is None or parallel.leader


def leader_reads(args: argparse.Namespace, read):
    """``read()`` here, or under --tensor-parallel on rank 0 and shared with every rank."""
    parallel = getattr(args, "parallel", None)
    return read() if parallel is None else parallel.on_leader(read)


def adapter_hook(args: argparse.Namespace):
    """What ``load_checkpoint(prepare=...)`` takes for ``--adapter`` or ``--tensor-parallel`` (None without)."""
    if getattr(args, "parallel", None) is not None:
        return args.parallel.prepare
    if not getattr(args, "adapter", None):
        return None
    from functools import partial

    from aiayn.interop.peft import load_adapter

    return partial(load_adapter, folder=args.adapter)


def add_decoding(p) -> None:
    """The flags of the commands that translate: decoding, precision, speculation, shortlist, batch, device,
    adapter."""
    add_decoding_options(p)
    add_adapter(p)
    add_precision(p)
    add_draft(p)
    p.add_argument("--shortlist", help="a lexical shortlist (aiayn shortlist): decode each batch over its candidate "
                   "target tokens only (faster; see docs/decoding.md)")
    p.add_argument("--batch-size", type=int, default=64, dest="batch_size")
    p.add_argument("--device", default="cpu")


def add_draft(p) -> None:
    """--draft and --draft-tokens: speculative greedy decoding (the same output, several tokens a pass)."""
    p.add_argument("--draft", metavar="CHECKPOINT|ngram|int4|int8|none",
                   help="speculative greedy decoding, the same output as greedy with fewer passes of the model, "
                        "drafted by: ngram (the continuation of the latest repeat of the last tokens in the prompt or "
                        "the output: no second model), int4 or int8 (the checkpoint's own quantized copy, loaded "
                        "beside it), or a smaller checkpoint with the same tokenizer; greedy unless --temperature is "
                        "given (then speculative sampling: the same distribution); default: the draft the "
                        "checkpoint's generation.json names (\"draft\"), if any; none: no draft (docs/decoding.md)")
    p.add_argument("--draft-tokens", type=int, dest="draft_tokens", metavar="K",
                   help="tokens drafted a pass (default: adapted to how many the model accepts, none while "
                        "drafting does not pay)")


def add_corpus(p) -> None:
    """--data and what resolves it: the languages and a local copy of a built-in corpus."""
    p.add_argument("--data", required=True, help="DATA as for aiayn train (built-in name, TSV, prefix or folder)")
    p.add_argument("--src-lang", dest="src_lang", help="source language (built-in corpora, PREFIX.SRC files)")
    p.add_argument("--tgt-lang", dest="tgt_lang", help="target language")
    p.add_argument("--data-dir", dest="data_dir", help="a local copy of a built-in corpus")
