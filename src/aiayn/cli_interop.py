"""The commands that bring models and corpora in and out, and run experiments: ``aiayn import``, ``export``,
``data``, ``preprocess``, ``distill``, ``shortlist`` and ``experiment`` (their flags: ``cli_args.py``)."""

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
