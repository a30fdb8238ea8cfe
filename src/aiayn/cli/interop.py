"""``aiayn import`` and ``export``: pretrained models in and out."""

from __future__ import annotations

import argparse

from aiayn.cli.common import add_overwrite, claim


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="import a Hugging Face model folder (Marian, GPT-2, BERT, Llama, Qwen2, "
                                      "Mistral, sentence-transformers) as a checkpoint",
                       description="Read a local Hugging Face model folder (config.json, model.safetensors or its "
                                   "shards, the tokenizer files) of a MarianMTModel, GPT2LMHeadModel, "
                                   "BertForMaskedLM, BertModel (or a sentence-transformers folder of one), "
                                   "LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM and write an aiayn "
                                   "checkpoint that translate, generate, fill-mask, embed, serve and show take. "
                                   "Nothing is downloaded: see docs/pretrained.md for getting the folder.")
    p.add_argument("folder", help="the Hugging Face model folder")
    p.add_argument("--output", required=True, help="the aiayn checkpoint folder to write")
    add_overwrite(p)


def import_(args: argparse.Namespace) -> int:
    from aiayn.interop import import_pretrained

    print(import_pretrained(args.folder, args.output, args.overwrite))
    return 0


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="export a translator or a language model as a Hugging Face folder or a "
                                      "CTranslate2 model",
                       description="Write an aiayn encoder-decoder checkpoint as a Hugging Face Marian folder "
                                   "(MarianMTModel.from_pretrained loads it), a decoder-only one as a "
                                   "LlamaForCausalLM (Qwen2, Mistral) or GPT2LMHeadModel folder, whichever has its "
                                   "shape, or either through CTranslate2's converters as a CTranslate2 model. "
                                   "Options the target cannot express are named in the error.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--format", required=True, choices=["hf", "ctranslate2"], dest="format")
    p.add_argument("--output", required=True, help="the folder to write")
    add_overwrite(p)
    p.add_argument("--quantization", choices=["int8", "int8_float32", "float16", "bfloat16"],
                   help="ctranslate2 only: store the weights quantized (default: float32)")


def export(args: argparse.Namespace) -> int:
    claim(args.output, "export", args, folder=True)
    if args.format == "hf":
        from aiayn.interop.hf_export import export_hf

        if args.quantization:
            raise ValueError("--quantization: only for --format ctranslate2")
        print(export_hf(args.checkpoint, args.output, args.overwrite))
    else:
        try:
            from aiayn.interop.ctranslate2 import export_ctranslate2
        except ImportError:
            raise ValueError("export --format ctranslate2 needs the ctranslate2 package: pip install ctranslate2") \
                from None
        print(export_ctranslate2(args.checkpoint, args.output, args.quantization, args.overwrite))
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
