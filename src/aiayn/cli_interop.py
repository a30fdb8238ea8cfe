"""The commands that bring models and corpora in and out, and run experiments: ``aiayn import``, ``export``,
``data``, ``preprocess``, ``distill``, ``shortlist`` and ``experiment``: their flags and their code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def distill(args: argparse.Namespace) -> int:
    from aiayn.data.datasets import load_splits
    from aiayn.distill import distill
    from aiayn.translate import Translator

    if args.beam_size < 1 or args.chunk < 1:
        raise ValueError("--beam-size and --chunk: must be at least 1")
    splits = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir)
    translator = Translator.from_checkpoint(args.teacher, args.device)
    about = {"teacher": str(args.teacher), "data": args.data}
    print(json.dumps(distill(translator, splits, args.output, args.beam_size, args.chunk, about)))
    return 0


def shortlist(args: argparse.Namespace) -> int:
    from aiayn.checkpoint import CONFIG, resolve_checkpoint
    from aiayn.config import ModelConfig
    from aiayn.data.datasets import load_splits
    from aiayn.shortlist import build_shortlist
    from aiayn.tokenizer import TokenizerPair

    if args.frequent < 0 or args.per_token < 1:
        raise ValueError("--frequent: must be at least 0; --per-token: at least 1")
    folder = resolve_checkpoint(args.checkpoint)
    cfg, tokenizers = ModelConfig.load(folder / CONFIG), TokenizerPair.load(folder)
    train = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir).train
    encode = [tok.encode_batch([" ".join(t.split()) for t in texts])
              for tok, texts in ((tokenizers.src, train.sources), (tokenizers.tgt, train.targets))]
    table = build_shortlist(zip(*encode, strict=True), cfg.vocab_size, cfg.target_vocab, args.frequent,
                            args.per_token)
    table.save(args.output)
    print(json.dumps({"pairs": len(train.sources), "frequent": table.frequent.numel(),
                      "per_token": args.per_token, "output": str(args.output)}))
    return 0


def data(args: argparse.Namespace) -> int:
    from aiayn.data.wmt import prepare_wmt14

    print(json.dumps(prepare_wmt14(args.output, args.base_url)))
    return 0


def preprocess(args: argparse.Namespace) -> int:
    from aiayn.preprocess import preprocess

    for name in ("shard_size", "max_len", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be at least 1")
    manifest = preprocess(args.data, args.tokenizer, args.output, args.src_lang, args.tgt_lang, args.data_dir,
                          args.valid, args.shard_size, args.workers, args.max_len)
    print(json.dumps({k: v for k, v in manifest.items() if k != "shards"} | {"shards": len(manifest["shards"])}))
    return 0


def experiment(args: argparse.Namespace) -> int:
    from aiayn.training.experiment import read_experiment, run_experiment

    rows = run_experiment(args.file, args.only, args.data_dir)
    print(f"{len(rows)} variant(s) done; table: {Path(read_experiment(args.file)['output']) / 'results.md'}")
    return 0


def import_(args: argparse.Namespace) -> int:
    from aiayn.interop import import_pretrained

    print(import_pretrained(args.folder, args.output))
    return 0


def export(args: argparse.Namespace) -> int:
    if args.format == "hf":
        from aiayn.interop.hf_export import export_hf

        if args.quantization:
            raise ValueError("--quantization: only for --format ctranslate2")
        print(export_hf(args.checkpoint, args.output))
    else:
        try:
            from aiayn.interop.ctranslate2 import export_ctranslate2
        except ImportError:
            raise ValueError("export --format ctranslate2 needs the ctranslate2 package: pip install ctranslate2") \
                from None
        print(export_ctranslate2(args.checkpoint, args.output, args.quantization))
    return 0


def _add_distill(sub) -> None:
    p = sub.add_parser("distill", help="translate a corpus with a teacher, for a student to train on",
                       description="Sequence-level knowledge distillation (Kim & Rush, 2016): the teacher translates "
                                   "the training sources of DATA; DIR gets train.tsv (source, teacher's translation), "
                                   "valid.tsv and test.tsv (the real references) and distill.json. Interrupted runs "
                                   "continue where they stopped. Then: aiayn train --data DIR ...")
    p.add_argument("--teacher", required=True, help="the teacher's run or checkpoint folder")
    _add_corpus(p)
    p.add_argument("--output", required=True, help="the corpus folder to write")
    p.add_argument("--beam-size", type=int, default=4, dest="beam_size", help="teacher's beam size (default: 4)")
    p.add_argument("--chunk", type=int, default=1000, help="sentences per resumable chunk (default: 1000)")
    p.add_argument("--device", default="cpu")


def _add_shortlist(sub) -> None:
    p = sub.add_parser("shortlist", help="build a lexical shortlist for faster decoding (translate --shortlist)",
                       description="Count the training pairs of DATA, tokenized with the checkpoint's tokenizers, into "
                                   "a shortlist: the FREQUENT most frequent target tokens and, per source token, the "
                                   "PER_TOKEN target tokens most associated with it (Dice coefficient of sentence "
                                   "co-occurrence). Written as safetensors; then aiayn translate --shortlist FILE.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder (for its tokenizers)")
    _add_corpus(p)
    p.add_argument("--output", required=True, help="the shortlist file to write (.safetensors)")
    p.add_argument("--frequent", type=int, default=200, help="most frequent target tokens, always candidates "
                   "(default: 200)")
    p.add_argument("--per-token", type=int, default=100, dest="per_token",
                   help="candidates per source token (default: 100; with 200 frequent, no BLEU lost on Multi30k)")


def _add_corpus(p) -> None:
    """--data and what resolves it: the languages and a local copy of a built-in corpus."""
    p.add_argument("--data", required=True, help="DATA as for aiayn train (built-in name, TSV, prefix or folder)")
    p.add_argument("--src-lang", dest="src_lang", help="source language (built-in corpora, PREFIX.SRC files)")
    p.add_argument("--tgt-lang", dest="tgt_lang", help="target language")
    p.add_argument("--data-dir", dest="data_dir", help="a local copy of a built-in corpus")


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="download and check a large corpus (WMT14 en-de, the paper's)",
                       description="Download the corpus archives into OUTPUT/downloads (kept for reruns), check every "
                                   "file's line count, and write OUTPUT/{train,valid,test}.{en,de}. Then: aiayn "
                                   "tokenizer train, aiayn preprocess (docs/scaling.md).")
    p.add_argument("name", choices=["wmt14-en-de"], help="the corpus")
    p.add_argument("--output", required=True, help="folder for the corpus")
    p.add_argument("--base-url", dest="base_url", help="a mirror with statmt.org's layout (default: statmt.org, or "
                   "$AIAYN_WMT14_URL)")


def _add_preprocess(sub) -> None:
    p = sub.add_parser("preprocess", help="tokenize a corpus once into binary shards (corpora larger than memory)",
                       description="Stream DATA through worker processes into DIR: shards of token ids (memory-mapped "
                                   "by training), the tokenizer, valid.tsv and shards.json. Interrupted runs keep the "
                                   "finished shards. Then: aiayn train --data DIR ...")
    _add_corpus(p)
    p.add_argument("--tokenizer", required=True, help="folder with the tokenizer model(s) (aiayn tokenizer)")
    p.add_argument("--output", required=True, help="the shards folder to write")
    p.add_argument("--valid", help="validation file or prefix (default: every 100th of the first 100,000 pairs)")
    p.add_argument("--shard-size", type=int, default=1_000_000, dest="shard_size",
                   help="pairs per shard (default: 1,000,000)")
    p.add_argument("--workers", type=int, help="tokenizing processes (default: one per CPU core)")
    p.add_argument("--max-len", type=int, default=256, dest="max_len",
                   help="pairs with more tokens on a side are left out and counted (default: 256)")


def _add_experiment(sub) -> None:
    p = sub.add_parser("experiment", help="train the variants of an experiment file and write its table and plots",
                       description="Train every variant of FILE (a YAML experiment: a base recipe, the shared budget, "
                                   "and NAME: {changes}) into OUTPUT/NAME, resuming interrupted ones and skipping "
                                   "finished ones, then write OUTPUT/results.md, results.json and curves.png.")
    p.add_argument("file", help="the experiment file (see experiments/)")
    p.add_argument("--only", nargs="+", help="train only these variants (the table lists all that are done)")
    p.add_argument("--data-dir", dest="data_dir", help="a local copy of the corpus (no download), for every variant")


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="import a Hugging Face model folder (Marian, GPT-2, BERT) as a checkpoint",
                       description="Read a local Hugging Face model folder (config.json, model.safetensors, the "
                                   "tokenizer files) of a MarianMTModel, GPT2LMHeadModel or BertForMaskedLM and write "
                                   "an aiayn checkpoint that translate, generate, fill-mask, serve and show take. "
                                   "Nothing is downloaded: see docs/pretrained.md for getting the folder.")
    p.add_argument("folder", help="the Hugging Face model folder")
    p.add_argument("--output", required=True, help="the aiayn checkpoint folder to write")


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="export a translator as a Hugging Face Marian folder or a CTranslate2 model",
                       description="Write an aiayn encoder-decoder checkpoint as a Hugging Face Marian folder "
                                   "(MarianMTModel.from_pretrained loads it) or, through CTranslate2's converter, a "
                                   "CTranslate2 model. Options Marian cannot express are named in the error.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--format", required=True, choices=["hf", "ctranslate2"], dest="format")
    p.add_argument("--output", required=True, help="the folder to write")
    p.add_argument("--quantization", choices=["int8", "int8_float32", "float16", "bfloat16"],
                   help="ctranslate2 only: store the weights quantized (default: float32)")


def add_interop_parsers(sub) -> None:
    """Add these commands to the ``aiayn`` parser's subcommands (``cli_args.build_parser``)."""
    for add in (_add_import, _add_export, _add_data, _add_preprocess, _add_distill, _add_shortlist,
                _add_experiment):
        add(sub)
