"""``aiayn tokenizer train``, ``data``, ``preprocess`` and ``shortlist``: corpora and what is built from them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aiayn.cli.common import add_corpus, add_overwrite, claim


def _add_tokenizer(sub) -> None:
    t = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="tool", required=True)
    tt = t.add_parser("train", help="train a SentencePiece tokenizer on a dataset's training side(s)")
    tt.add_argument("--data", required=True)
    tt.add_argument("--src-lang", dest="src_lang")
    tt.add_argument("--tgt-lang", dest="tgt_lang")
    tt.add_argument("--data-dir", dest="data_dir")
    tt.add_argument("--vocab-size", type=int, default=8000, dest="vocab_size")
    tt.add_argument("--type", choices=["bpe", "unigram", "char"], default="bpe")
    tt.add_argument("--separate", action="store_true", help="separate source and target vocabularies")
    tt.add_argument("--output", required=True, help="folder for tokenizer.model (or .src/.tgt)")
    add_overwrite(tt)


def tokenizer_train(args: argparse.Namespace) -> int:
    from aiayn.data.datasets import load_splits
    from aiayn.io.files import atomic_directory
    from aiayn.tokenizers import SentencePiecePair

    claim(args.output, "tokenizer", args, folder=True)
    splits = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir)
    pair = SentencePiecePair.train(splits.train.sources, splits.train.targets, args.vocab_size, not args.separate,
                               args.type)
    out = Path(args.output)
    with atomic_directory(out, "tokenizer", args.overwrite) as tmp:
        pair.save(tmp)
    print(f"wrote {'a joint' if pair.joint else 'source and target'} {args.type} tokenizer "
          f"({len(pair.src)} pieces) to {out}")
    return 0


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="download and check a large corpus (WMT14 en-de, the paper's)",
                       description="Download the corpus archives into OUTPUT/downloads (kept for reruns), check every "
                                   "file's line count, and write OUTPUT/{train,valid,test}.{en,de}. Then: aiayn "
                                   "tokenizer train, aiayn preprocess (docs/scaling.md).")
    p.add_argument("name", choices=["wmt14-en-de"], help="the corpus")
    p.add_argument("--output", required=True, help="folder for the corpus")
    add_overwrite(p)
    p.add_argument("--base-url", dest="base_url", help="a mirror with statmt.org's layout (default: statmt.org, or "
                   "$AIAYN_WMT14_URL)")


def data(args: argparse.Namespace) -> int:
    from aiayn.data.wmt import prepare_wmt14

    print(json.dumps(prepare_wmt14(args.output, args.base_url, overwrite=args.overwrite)))
    return 0


def _add_preprocess(sub) -> None:
    p = sub.add_parser("preprocess", help="tokenize a corpus once into binary shards (corpora larger than memory)",
                       description="Stream DATA through worker processes into DIR: shards of token ids (memory-mapped "
                                   "by training), the tokenizer, valid.tsv and shards.json. Interrupted runs keep the "
                                   "finished shards. Then: aiayn train --data DIR ...")
    add_corpus(p)
    p.add_argument("--tokenizer", required=True, help="folder with the tokenizer model(s) (aiayn tokenizer)")
    p.add_argument("--output", required=True, help="the shards folder to write")
    add_overwrite(p)
    p.add_argument("--valid", help="validation file or prefix (default: every 100th of the first 100,000 pairs)")
    p.add_argument("--shard-size", type=int, default=1_000_000, dest="shard_size",
                   help="pairs per shard (default: 1,000,000)")
    p.add_argument("--workers", type=int, help="tokenizing processes (default: one per CPU core)")
    p.add_argument("--max-len", type=int, default=256, dest="max_len",
                   help="pairs with more tokens on a side are left out and counted (default: 256)")


def preprocess(args: argparse.Namespace) -> int:
    from aiayn.data.preprocess import preprocess

    for name in ("shard_size", "max_len", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be at least 1")
    manifest = preprocess(args.data, args.tokenizer, args.output, args.src_lang, args.tgt_lang, args.data_dir,
                          args.valid, args.shard_size, args.workers, args.max_len, overwrite=args.overwrite)
    print(json.dumps({k: v for k, v in manifest.items() if k != "shards"} | {"shards": len(manifest["shards"])}))
    return 0


def _add_shortlist(sub) -> None:
    p = sub.add_parser("shortlist", help="build a lexical shortlist for faster decoding (translate --shortlist)",
                       description="Count the training pairs of DATA, tokenized with the checkpoint's tokenizers, into "
                                   "a shortlist: the FREQUENT most frequent target tokens and, per source token, the "
                                   "PER_TOKEN target tokens most associated with it (Dice coefficient of sentence "
                                   "co-occurrence). Written as safetensors; then aiayn translate --shortlist FILE.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder (for its tokenizers)")
    add_corpus(p)
    p.add_argument("--output", required=True, help="the shortlist file to write (.safetensors)")
    add_overwrite(p)
    p.add_argument("--frequent", type=int, default=200, help="most frequent target tokens, always candidates "
                   "(default: 200)")
    p.add_argument("--per-token", type=int, default=100, dest="per_token",
                   help="candidates per source token (default: 100; with 200 frequent, no BLEU lost on Multi30k)")


def shortlist(args: argparse.Namespace) -> int:
    from aiayn.data.datasets import load_splits
    from aiayn.inference.shortlist import build_shortlist
    from aiayn.io.checkpoint import CONFIG
    from aiayn.io.run import resolve_checkpoint
    from aiayn.model.config import ModelConfig
    from aiayn.tokenizers import load_tokenizers

    if args.frequent < 0 or args.per_token < 1:
        raise ValueError("--frequent: must be at least 0; --per-token: at least 1")
    claim(args.output, "shortlist", args)
    folder = resolve_checkpoint(args.checkpoint)
    cfg, tokenizers = ModelConfig.load(folder / CONFIG), load_tokenizers(folder)
    train = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir).train
    encode = [tok.encode_batch([" ".join(t.split()) for t in texts])
              for tok, texts in ((tokenizers.src, train.sources), (tokenizers.tgt, train.targets))]
    table = build_shortlist(zip(*encode, strict=True), cfg.vocab_size, cfg.target_vocab, args.frequent,
                            args.per_token)
    table.save(args.output)
    print(json.dumps({"pairs": len(train.sources), "frequent": table.frequent.numel(),
                      "per_token": args.per_token, "output": str(args.output)}))
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_tokenizer(sub)
    _add_data(sub)
    _add_preprocess(sub)
    _add_shortlist(sub)
