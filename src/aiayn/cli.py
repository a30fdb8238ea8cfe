"""The ``aiayn`` command line. User mistakes end with a one-line message and exit code 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aiayn import __version__
from aiayn.data.corpus import DataError
from aiayn.demo import CopyRecipe


class UserError(Exception):
    """A mistake in the user's input: reported in one line, no traceback."""


def _demo(args: argparse.Namespace) -> int:
    from aiayn.demo import run_demo, run_numbers_demo

    if args.steps is not None and args.steps <= 0:
        raise UserError("--steps: must be a positive integer")
    if args.task == "copy":
        run_demo(steps=args.steps or CopyRecipe.steps, seed=args.seed)
    else:
        run_numbers_demo(output=args.output, steps=args.steps, seed=args.seed)
    return 0


TRAIN_FLAGS = ("data", "preset", "max_steps", "output", "data_dir", "src_lang", "tgt_lang", "task", "valid",
               "tokenizer", "vocab_size", "tokenizer_type", "max_tokens", "eval_every", "seed", "device",
               "precision", "time_limit_min", "accum", "lr", "warmup", "schedule")


def _train(args: argparse.Namespace) -> int:
    from aiayn.training.config import TrainConfig
    from aiayn.training.setup import existing_run
    from aiayn.training.trainer import Trainer

    overrides = {k: getattr(args, k) for k in TRAIN_FLAGS}
    if args.joint_vocab is not None:
        overrides["joint_vocab"] = args.joint_vocab
    cfg = (TrainConfig.from_yaml(args.config, **overrides) if args.config
           else TrainConfig.from_dict({k: v for k, v in overrides.items() if v is not None}))
    out = Path(cfg.output)
    if args.resume and not existing_run(out):
        raise UserError(f"--resume: {out / 'last'} holds no checkpoint to resume from")
    if not args.resume and existing_run(out):
        raise UserError(f"--output: {out} already holds a run; pass --resume to continue it or choose another folder")
    result = Trainer(cfg, resume=args.resume).train()
    print(json.dumps(result))
    return 0


def _read_input(path: str | None) -> list[str]:
    from aiayn.data.corpus import read_lines

    return read_lines(path) if path else [line.rstrip("\r\n") for line in sys.stdin]


def _write_output(lines: list[str], path: str | None) -> None:
    from aiayn.config import atomic_write_text

    text = "".join(line + "\n" for line in lines)
    if path:
        atomic_write_text(Path(path), text)
    else:
        sys.stdout.write(text)


def _translator(args: argparse.Namespace):
    from aiayn.translate import Translator

    beam_size = args.beam_size if args.beam_size is not None else (1 if args.draft else 4)
    return Translator.from_checkpoint(args.checkpoint, args.device, beam_size=beam_size, alpha=args.alpha,
                                      int8=args.int8, bf16=args.bf16, draft=args.draft)


def _translate(args: argparse.Namespace) -> int:
    translator = _translator(args)
    _write_output(translator.translate(_read_input(args.input), args.batch_size), args.output)
    if translator.draft is not None:
        print(translator.speculative.summary(), file=sys.stderr)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from aiayn.data.corpus import read_lines
    from aiayn.evaluation import score
    sources, refs = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(refs):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(refs)}")
    translator = _translator(args)
    hyps = translator.translate(sources, args.batch_size)
    if args.hyp_output:
        _write_output(hyps, args.hyp_output)
    result = score(hyps, refs, args.tokenize)
    extra = {}
    if translator.draft is not None:
        stats = translator.speculative
        print(stats.summary(), file=sys.stderr)
        extra = {"acceptance_rate": round(stats.acceptance_rate, 4),
                 "tokens_per_main_pass": round(stats.tokens_per_main_pass, 3)}
    if args.json:
        print(json.dumps({**result.to_dict(), **extra}))
    else:
        print(f"BLEU = {result.bleu:.2f}  ({result.bleu_signature})")
        print(f"chrF = {result.chrf:.2f}  ({result.chrf_signature})")
    return 0


def _average(args: argparse.Namespace) -> int:
    from aiayn.average import average_checkpoints, step_checkpoints

    folders = [Path(p) for p in args.checkpoints] or step_checkpoints(Path(args.run))[-args.last:]
    average_checkpoints(folders, Path(args.output))
    print(f"averaged {len(folders)} checkpoints into {args.output}")
    return 0


def _tokenizer_train(args: argparse.Namespace) -> int:
    from aiayn.data.datasets import load_splits
    from aiayn.tokenizer import TokenizerPair

    splits = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir)
    pair = TokenizerPair.train(splits.train.sources, splits.train.targets, args.vocab_size, not args.separate,
                               args.type)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    pair.save(out)
    print(f"wrote {'a joint' if pair.joint else 'source and target'} {args.type} tokenizer "
          f"({len(pair.src)} pieces) to {out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from aiayn.plots import plot_run

    for path in plot_run(Path(args.run), args.output):
        print(path)
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.what == "positions":
        from aiayn.visual.positions import plot_positions

        print(plot_positions(args.d_model, args.length, args.output))
    elif args.what == "shapes":
        from aiayn.config import ModelConfig, atomic_write_text
        from aiayn.visual.shapes import format_table, trace_shapes

        config = ModelConfig.preset(args.preset, vocab_size=args.vocab_size)
        table = format_table(trace_shapes(config), config)
        sys.stdout.write(table)
        if args.output:
            atomic_write_text(Path(args.output), table)
    else:
        from aiayn.translate import Translator
        from aiayn.visual.attention import KINDS, attention_for, plot_attention
        from aiayn.visual.figures import check_output

        check_output(args.output)
        maps = attention_for(Translator.from_checkpoint(args.checkpoint, args.device), args.sentence, args.target)
        print(f"translation: {maps.translation}")
        print(plot_attention(maps, args.output, KINDS if args.kind == "all" else (args.kind,)))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from aiayn.serve.app import Limits, run_server

    limits = Limits(args.max_chars, args.max_texts, args.max_new_tokens)
    run_server(args.checkpoint, args.host, args.port, limits, beam_size=args.beam_size, int8=args.int8,
               bf16=args.bf16, device=args.device, max_batch=args.max_batch, wait_ms=args.batch_wait_ms)
    return 0


COMMANDS = {"demo": _demo, "train": _train, "translate": _translate, "evaluate": _evaluate,
            "average": _average, "tokenizer": _tokenizer_train, "plot": _plot, "show": _show, "serve": _serve}


def main(argv: list[str] | None = None) -> int:
    from aiayn.cli_args import build_parser

    args = build_parser(__version__).parse_args(argv)
    if args.command == "average" and not args.checkpoints and not args.run:
        print("aiayn: error: average: give --run RUN or checkpoint folders", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](args)
    except (UserError, DataError, ValueError, FileNotFoundError) as err:
        print(f"aiayn: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
