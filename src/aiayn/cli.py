"""The ``aiayn`` command line. User mistakes end with a one-line message and exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from aiayn import __version__, cli_interop, cli_show
from aiayn.data.corpus import DataError


class UserError(Exception):
    """A mistake in the user's input: reported in one line, no traceback."""


def _demo(args: argparse.Namespace) -> int:
    from aiayn.demo import CopyRecipe, run_demo, run_numbers_demo

    if args.steps is not None and args.steps <= 0:
        raise UserError("--steps: must be a positive integer")
    if args.task == "copy":
        run_demo(steps=args.steps or CopyRecipe.steps, seed=args.seed)
    else:
        run_numbers_demo(output=args.output, steps=args.steps, seed=args.seed)
    return 0


def _recipe(args: argparse.Namespace):
    """The run's TrainConfig: the recipe file, then the flags given; with --resume, the run's own recipe
    with only the changes a resumed run may take (reported on stderr)."""
    import dataclasses

    from aiayn.checkpoint import read_json
    from aiayn.training.config import TrainConfig, read_recipe, resume_recipe

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
             if getattr(args, f.name, None) is not None}
    requested = {**(read_recipe(args.config) if args.config else {}), **given}
    source = args.config or "aiayn train"
    if not args.resume:
        return TrainConfig.from_dict(requested, source)
    out = Path(requested.get("output", TrainConfig.output))
    if not (out / "last" / "trainer.json").is_file():
        raise UserError(f"--resume: {out / 'last'} holds no checkpoint to resume from")
    saved = read_json(out / "last" / "trainer.json").get("recipe")
    if not isinstance(saved, dict):
        raise UserError(f"{out / 'last' / 'trainer.json'}: no recipe saved; cannot resume this run")
    cfg, changes = resume_recipe(saved, {**requested, "output": str(out)}, source)
    for line in changes:
        print(f"aiayn: resume: {line}", file=sys.stderr)
    return cfg


def _check_output_folder(out: Path) -> None:
    """--output must be a folder we can write (created if missing)."""
    import tempfile

    if out.exists() and not out.is_dir():
        raise UserError(f"--output: {out} is a file; give a folder for the run")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as err:
        raise UserError(f"--output: cannot write to {out} ({err.strerror or err}); choose another folder") from None


def _train(args: argparse.Namespace) -> int:
    from aiayn.checkpoint import is_checkpoint

    cfg = _recipe(args)
    out = Path(cfg.output)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restarts and not args.resume and is_checkpoint(out / "last"):  # torchrun --max-restarts restarted us
        print(f"aiayn: torchrun restart {restarts}: resuming from {out / 'last'}", file=sys.stderr)
        args.resume = True
        cfg = _recipe(args)
    _check_output_folder(out)
    if not args.resume and is_checkpoint(out / "last"):
        raise UserError(f"--output: {out} already holds a run; pass --resume to continue it or choose another folder")
    from aiayn.training.trainer import Trainer

    trainer = Trainer(cfg, resume=args.resume)
    result = trainer.train()
    print(json.dumps(result))
    if trainer.stopped_by_signal:
        print(f"aiayn: stopped by SIGTERM at step {trainer.step}; {out / 'last'} is saved: continue with --resume",
              file=sys.stderr)
        return 128 + 15
    return 0


def _read_input(path: str | None) -> list[str]:
    from aiayn.data.corpus import decode_lines, read_lines

    return read_lines(path) if path else decode_lines(sys.stdin.buffer, "<stdin>")


def _write_output(lines: list[str], path: str | None) -> None:
    from aiayn.checkpoint import atomic_write_text

    text = "".join(line + "\n" for line in lines)
    if path:
        atomic_write_text(Path(path), text)
    else:
        sys.stdout.write(text)


def _warn_truncated(translator, where: str) -> None:
    if translator.truncated:
        lines = ", ".join(str(i + 1) for i in translator.truncated[:20]) + (" ..." if len(translator.truncated) > 20
                                                                           else "")
        print(f"aiayn: warning: {where}: {len(translator.truncated)} line(s) longer than the model's "
              f"{translator.model.config.max_len} source tokens were cut (lines {lines})", file=sys.stderr)


def _translator(args: argparse.Namespace):
    from aiayn.translate import Translator

    beam_size = args.beam_size if args.beam_size is not None else (1 if args.draft else 4)
    return Translator.from_checkpoint(args.checkpoint, args.device, beam_size=beam_size, alpha=args.alpha,
                                      int8=args.int8, bf16=args.bf16, draft=args.draft, max_len_a=args.max_len_a,
                                      max_len_b=args.max_len_b, shortlist=args.shortlist)


def _translate(args: argparse.Namespace) -> int:
    lines = _read_input(args.input)
    translator = _translator(args)
    _write_output(translator.translate(lines, args.batch_size), args.output)
    _warn_truncated(translator, args.input or "<stdin>")
    if translator.draft is not None:
        print(translator.speculative.summary(), file=sys.stderr)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from aiayn.data.corpus import read_lines
    from aiayn.evaluation import score
    sources, refs = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(refs):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(refs)}")
    if not sources:
        raise UserError(f"{args.src}: no lines to translate; give a test set with at least one sentence")
    translator = _translator(args)
    hyps = translator.translate(sources, args.batch_size)
    _warn_truncated(translator, args.src)
    if args.hyp_output:
        _write_output(hyps, args.hyp_output)
    result = score(hyps, refs, args.tokenize, args.lowercase)
    extra = {"truncated_lines": len(translator.truncated)}
    if args.tokenized_bleu:
        from aiayn.evaluation import tokenized_bleu

        extra["tokenized_bleu"] = round(tokenized_bleu(hyps, refs, args.tokenized_bleu, args.lowercase), 2)
    if translator.draft is not None:
        stats = translator.speculative
        print(stats.summary(), file=sys.stderr)
        extra.update(acceptance_rate=round(stats.acceptance_rate, 4),
                     tokens_per_main_pass=round(stats.tokens_per_main_pass, 3))
    if args.json:
        print(json.dumps({**result.to_dict(), **extra}))
    else:
        print(f"BLEU = {result.bleu:.2f}  ({result.bleu_signature})")
        print(f"chrF = {result.chrf:.2f}  ({result.chrf_signature})")
        if args.tokenized_bleu:
            print(f"tokenized BLEU = {extra['tokenized_bleu']:.2f}  (Moses tokens, compounds split: the paper's)")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from aiayn.generation import TextGenerator

    for name in ("max_new_tokens", "num_samples"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')}: must be a positive integer")
    prompt = args.prompt if args.prompt is not None else "\n".join(_read_input(None))
    generator = TextGenerator.from_checkpoint(args.checkpoint, args.device)

    def show(sample: int, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    stream = args.num_samples == 1
    texts = generator.generate(prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed,
                               args.num_samples, show if stream else None)
    if stream:
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join(f"{text}\n---\n" for text in texts))
    return 0


def _fill_mask(args: argparse.Namespace) -> int:
    from aiayn.fill_mask import MaskFiller

    if args.top_k < 1:
        raise UserError("--top-k: must be a positive integer")
    masks = MaskFiller.from_checkpoint(args.checkpoint, args.device).fill(args.text, args.top_k)
    if args.json:
        print(json.dumps({"masks": [[{"token": c.token, "id": c.token_id, "probability": round(c.probability, 4)}
                                     for c in cands] for cands in masks]}, ensure_ascii=False))
        return 0
    for n, cands in enumerate(masks, start=1):
        print(f"<mask> {n}: " + "  ".join(f"{c.token.strip() or repr(c.token)} {c.probability:.3f}" for c in cands))
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


def _serve(args: argparse.Namespace) -> int:
    import dataclasses

    from aiayn.serve.app import run_server
    from aiayn.serve.limits import Limits

    limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
    run_server(args.checkpoint, args.host, args.port, limits, beam_size=args.beam_size, int8=args.int8,
               bf16=args.bf16, device=args.device, max_batch=args.max_batch, wait_ms=args.batch_wait_ms)
    return 0


COMMANDS = {"demo": _demo, "train": _train, "translate": _translate, "evaluate": _evaluate,
            "generate": _generate, "fill-mask": _fill_mask,
            "average": _average, "tokenizer": _tokenizer_train, "serve": _serve,
            "plot": cli_show.plot, "show": cli_show.show,
            "import": cli_interop.import_, "export": cli_interop.export, "distill": cli_interop.distill,
            "shortlist": cli_interop.shortlist,
            "data": cli_interop.data, "preprocess": cli_interop.preprocess,
            "experiment": cli_interop.experiment}


def main(argv: list[str] | None = None) -> int:
    from aiayn.cli_args import build_parser

    args = build_parser(__version__).parse_args(argv)
    if args.command == "average" and not args.checkpoints and not args.run:
        print("aiayn: error: average: give --run RUN or checkpoint folders", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](args)
    except (UserError, DataError, ValueError, FileNotFoundError) as err:
        print(f"aiayn: error: {_as_flags(str(err), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130


def _as_flags(message: str, args: argparse.Namespace) -> str:
    """Library errors name config fields (``max_steps: ...``); point at the flag the user typed too."""
    import re

    from aiayn.cli_args import flag

    given = [k for k, v in vars(args).items() if v is not None and v is not False and k not in ("command", "config")]
    for name in sorted(given, key=len, reverse=True):
        message = re.sub(rf"(?<![\w.-])(field )?{name}(?=: | must )", f"{flag(name)} (field {name})", message)
    return message


if __name__ == "__main__":
    sys.exit(main())
