"""``aiayn train``, ``average``, ``experiment`` and ``distill``: making models."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from aiayn.cli.common import (
    UserError,
    add_corpus,
    add_decoding_options,
    add_field_flags,
    add_overwrite,
    claim,
    decoding_options,
    examples,
)


def _add_train(sub) -> None:
    """``aiayn train``: --config and --resume, then one flag per TrainConfig field (its help, type and
    choices from the field; default None, so only the flags given override the recipe)."""

    from aiayn.training.config import TrainConfig

    p = sub.add_parser("train", help="train a model (translation, lm or mlm) on your data",
                       description="Train from a YAML recipe and/or flags (flags win). DATA is a built-in name "
                                   "(multi30k, tatoeba-cmn, copy, reverse, numbers) or a path: a TSV "
                                   "(source<TAB>target) or a prefix of PREFIX.SRC / PREFIX.TGT files (plain or .gz); "
                                   "for lm / mlm, a plain text file. RUN gets best/, last/ and metrics.jsonl.",
                       **examples("aiayn train --config multi30k-de-en --output runs/m30k",
                                  "aiayn train --data pairs.tsv --preset small --max-steps 20000 --output runs/mine",
                                  "aiayn train --config shakespeare-char --output runs/shakespeare",
                                  "aiayn train --init-from runs/smollm2 --task chat --data train.jsonl --lora-r 8 "
                                  "--output runs/ft",
                                  "aiayn train --output runs/m30k --resume"))
    p.add_argument("--config", help="a YAML recipe: a path, or the name of one aiayn carries (multi30k-de-en, "
                   "multi30k-en-de, shakespeare-char, ...)")
    add_overwrite(p, "a folder that holds no run: train into it anyway")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its last/ checkpoint "
                   "(with its recipe; flags may change only limits such as --max-steps)")
    add_field_flags(p, TrainConfig)  # the mappings (model, decoding) are for recipe files only


def _recipe(args: argparse.Namespace):
    """The run's TrainConfig: the recipe file, then the flags given; with --resume, the run's own recipe
    with only the changes a resumed run may take (reported on stderr)."""
    import dataclasses

    from aiayn.io.run import RunFolder
    from aiayn.training.config import TrainConfig, read_recipe, resume_config

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
             if getattr(args, f.name, None) is not None}
    requested = {**(read_recipe(args.config) if args.config else {}), **given}
    source = args.config or "aiayn train"
    if not args.resume:
        return TrainConfig.from_dict(requested, source)
    cfg, changes = resume_config(RunFolder(requested.get("output", TrainConfig.output)), requested, source)
    for line in changes:
        print(f"aiayn: resume: {line}", file=sys.stderr)
    return cfg


def _check_output_folder(out: Path, overwrite: bool) -> None:
    """--output must be a folder we can write (created if missing) that is empty or a run's."""
    import tempfile

    from aiayn.io.files import output_folder
    from aiayn.io.run import RUN_FILES

    try:
        output_folder(out, "train", overwrite, own_files=RUN_FILES)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as err:
        raise UserError(f"--output: cannot write to {out} ({err.strerror or err}); choose another folder") from None


def train(args: argparse.Namespace) -> int:
    from aiayn.io.run import RunFolder

    cfg = _recipe(args)
    out, run = Path(cfg.output), RunFolder(cfg.output)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restarts and not args.resume and run.has_last():  # torchrun --max-restarts restarted us
        print(f"aiayn: torchrun restart {restarts}: resuming from {run.last}", file=sys.stderr)
        args.resume = True
        cfg = _recipe(args)
    if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 alone claims the folder (it alone writes it)
        _check_output_folder(out, args.overwrite)
    if not args.resume and run.has_last():
        raise UserError(f"--output: {out} already holds a run; pass --resume to continue it or choose another folder")
    from aiayn.training.trainer import Trainer

    trainer = Trainer(cfg, resume=args.resume)
    result = trainer.train()
    print(json.dumps(result))
    if trainer.stopped_by_signal:
        print(f"aiayn: stopped by SIGTERM at step {trainer.step}; {run.last} is saved: continue with --resume",
              file=sys.stderr)
        return 128 + 15
    return 0


def _add_average(sub) -> None:
    a = sub.add_parser("average", help="average checkpoints into one (the paper's trick)",
                       description="Average the last K step checkpoints of a run (or the folders given).")
    a.add_argument("--run", help="run folder whose checkpoints/step_* to average")
    a.add_argument("--last", type=int, default=5, help="how many of the newest (default: 5)")
    a.add_argument("checkpoints", nargs="*", help="checkpoint folders (instead of --run)")
    a.add_argument("--output", required=True, help="folder for the averaged checkpoint")
    add_overwrite(a)


def average(args: argparse.Namespace) -> int:
    from aiayn.io.run import RunFolder
    from aiayn.training.average import average_checkpoints

    folders = [Path(p) for p in args.checkpoints] or RunFolder(args.run).steps()[-args.last:]
    average_checkpoints(folders, Path(args.output), args.overwrite)
    print(f"averaged {len(folders)} checkpoints into {args.output}")
    return 0


def _add_experiment(sub) -> None:
    p = sub.add_parser("experiment", help="train the variants of an experiment file and write its table and plots",
                       description="Train every variant of FILE (a YAML experiment: a base recipe, the shared budget, "
                                   "and NAME: {changes}) into OUTPUT/NAME, resuming interrupted ones and skipping "
                                   "finished ones, then write OUTPUT/results.md, results.json and curves.png.")
    p.add_argument("file", help="the experiment file (see experiments/)")
    p.add_argument("--only", nargs="+", help="train only these variants (the table lists all that are done)")
    p.add_argument("--data-dir", dest="data_dir", help="a local copy of the corpus (no download), for every variant")
    add_overwrite(p, "the experiment's output folder")


def experiment(args: argparse.Namespace) -> int:
    from aiayn.training.experiment import read_experiment, run_experiment

    rows = run_experiment(args.file, args.only, args.data_dir, args.overwrite)
    print(f"{len(rows)} variant(s) done; table: {Path(read_experiment(args.file)['output']) / 'results.md'}")
    return 0


def _add_distill(sub) -> None:
    p = sub.add_parser("distill", help="translate a corpus with a teacher, for a student to train on",
                       description="Sequence-level knowledge distillation (Kim & Rush, 2016): the teacher translates "
                                   "the training sources of DATA; DIR gets train.tsv (source, teacher's translation), "
                                   "valid.tsv and test.tsv (the real references) and distill.json. Interrupted runs "
                                   "continue where they stopped. Then: aiayn train --data DIR ...")
    p.add_argument("--teacher", required=True, help="the teacher's run or checkpoint folder")
    add_corpus(p)
    p.add_argument("--output", required=True, help="the corpus folder to write")
    p.add_argument("--chunk", type=int, default=1000, help="sentences per resumable chunk (default: 1000)")
    p.add_argument("--batch-size", type=int, default=64, dest="batch_size",
                   help="sentences translated together (default: 64; a GPU takes several hundred)")
    add_overwrite(p)
    p.add_argument("--device", default="cpu")
    add_decoding_options(p)


def distill(args: argparse.Namespace) -> int:
    from aiayn.data.datasets import load_splits
    from aiayn.inference.translator import Translator
    from aiayn.training.distill import distill

    if args.chunk < 1 or args.batch_size < 1:
        raise ValueError(f"--{'chunk' if args.chunk < 1 else 'batch-size'}: must be at least 1")
    claim(args.output, "distill", args, folder=True, own_files=("distill.json", "parts"))
    splits = load_splits(args.data, args.src_lang, args.tgt_lang, args.data_dir)
    translator = Translator.from_checkpoint(args.teacher, args.device, decoding=decoding_options(args))
    about = {"teacher": str(args.teacher), "data": args.data}
    print(json.dumps(distill(translator, splits, args.output, args.chunk, about, overwrite=args.overwrite,
                             batch_size=args.batch_size)))
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_train(sub)
    _add_average(sub)
    _add_experiment(sub)
    _add_distill(sub)
