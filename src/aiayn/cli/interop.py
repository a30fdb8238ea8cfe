"""``aiayn import`` and ``export``: pretrained models in and out."""

from __future__ import annotations

import argparse

from aiayn.cli.common import add_overwrite, claim


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="import a Hugging Face model folder (Marian, GPT-2, BERT, Llama, Qwen2, "
                                      "Qwen3, Mistral, sentence-transformers) or a GGUF file as a checkpoint",
                       description="Read a local Hugging Face model folder (config.json, model.safetensors or its "
                                   "shards, the tokenizer files) of a MarianMTModel, GPT2LMHeadModel, "
                                   "BertForMaskedLM, BertModel (or a sentence-transformers folder of one), "
                                   "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or MistralForCausalLM and "
                                   "write an aiayn checkpoint that translate, generate, fill-mask, embed, serve and "
                                   "show take. A .gguf file (llama.cpp's: llama, qwen2, qwen3 or gpt2 architecture, "
                                   "any type the gguf package dequantizes) is read as well. Nothing is downloaded: see "
                                   "docs/pretrained.md for getting the folder or file.")
    p.add_argument("folder", help="the Hugging Face model folder, or a .gguf file")
    p.add_argument("--output", required=True, help="the aiayn checkpoint folder to write")
    add_overwrite(p)


def import_(args: argparse.Namespace) -> int:
    from aiayn.interop import import_pretrained

    print(import_pretrained(args.folder, args.output, args.overwrite))
    return 0


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="export a translator or a language model as a Hugging Face folder, a "
                                      "CTranslate2 model or (language models) a GGUF file",
                       description="Write an aiayn encoder-decoder checkpoint as a Hugging Face Marian folder "
                                   "(MarianMTModel.from_pretrained loads it), a decoder-only one as a "
                                   "LlamaForCausalLM (Qwen2, Mistral) or GPT2LMHeadModel folder, whichever has its "
                                   "shape, or either through CTranslate2's converters as a CTranslate2 model, or a "
                                   "Llama-, Qwen2-, Mistral- or GPT-2-shaped language model as one GGUF file for "
                                   "llama.cpp. "
                                   "Options the target cannot express are named in the error.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--format", required=True, choices=["hf", "ctranslate2", "gguf"], dest="format")
    p.add_argument("--output", required=True, help="the folder to write (gguf: the file, e.g. model.gguf)")
    add_overwrite(p)
    p.add_argument("--quantization", help=f"how the weights are stored: ctranslate2 {', '.join(CT2_TYPES)} "
                                          "(default float32); gguf f32, f16, bf16, q8_0, q4_0 (default f32)")


CT2_TYPES = ("int8", "int8_float32", "float16", "bfloat16")


def export(args: argparse.Namespace) -> int:
    from aiayn.interop.gguf_export import QUANTIZATIONS

    kinds = {"ctranslate2": CT2_TYPES, "gguf": QUANTIZATIONS}.get(args.format, ())
    if args.quantization and args.quantization not in kinds:
        raise ValueError(f"--quantization {args.quantization}: not for --format {args.format}"
                         + (f"; choose {', '.join(kinds)}" if kinds else ""))
    claim(args.output, "export", args, folder=args.format != "gguf")
    from aiayn.interop import export_pretrained

    print(export_pretrained(args.checkpoint, args.output, args.format, args.quantization, args.overwrite))
    return 0


def _add_merge(sub) -> None:
    p = sub.add_parser("merge", help="fold a LoRA adapter into its base checkpoint's weights",
                       description="Load --checkpoint, put the LoRA adapter --adapter on it (PEFT's folder format), "
                                   "fold each low-rank update into its weight (W + alpha/r B A) and write a plain "
                                   "checkpoint: it runs at the base model's speed, with the adapter's outputs.")
    p.add_argument("--checkpoint", required=True, help="the base checkpoint or run folder")
    p.add_argument("--adapter", required=True, help="the adapter folder (adapter_config.json + "
                   "adapter_model.safetensors)")
    p.add_argument("--output", required=True, help="the checkpoint folder to write")
    add_overwrite(p)


def merge(args: argparse.Namespace) -> int:
    from aiayn.decoding.config import DecodingConfig
    from aiayn.inference.load import load_checkpoint
    from aiayn.interop.peft import load_adapter
    from aiayn.io.checkpoint import CHECKSUMS, write_checkpoint
    from aiayn.io.run import resolve_checkpoint
    from aiayn.model.lora import merge_lora

    claim(args.output, "merge", args, folder=True, own_files=(CHECKSUMS,))
    model, tokenizers = load_checkpoint(args.checkpoint)
    load_adapter(model, args.adapter)
    merge_lora(model)
    generation = DecodingConfig.load(resolve_checkpoint(args.checkpoint)).changes() or None
    write_checkpoint(args.output, model, tokenizers, generation=generation, by="merge", overwrite=args.overwrite)
    print(args.output)
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_import(sub)
    _add_export(sub)
    _add_merge(sub)
