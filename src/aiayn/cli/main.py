"""The ``aiayn`` command line: one parser over every command group's module. User mistakes end with a one-line
message and exit code 2."""

from __future__ import annotations

import argparse
import os
import sys

from aiayn import __version__
from aiayn.cli import chat, data, decode, demo, interop, serve, show, train
from aiayn.cli.common import UserError, flag
from aiayn.data.corpus import DataError
from aiayn.training import memory

COMMANDS = {"demo": demo.demo, "train": train.train, "average": train.average, "experiment": train.experiment,
            "distill": train.distill, "translate": decode.translate, "evaluate": decode.evaluate,
            "generate": decode.generate, "chat": chat.chat, "fill-mask": decode.fill_mask, "embed": decode.embed,
            "tokenizer": data.tokenizer_train,
            "data": data.data, "preprocess": data.preprocess, "shortlist": data.shortlist, "import": interop.import_,
            "export": interop.export, "merge": interop.merge, "plot": show.plot, "show": show.show,
            "serve": serve.serve}


def build_parser(version: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need': train, translate, evaluate.")
    parser.add_argument("--version", action="version", version=f"aiayn {version}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (demo, train, decode, chat, data, show, serve, interop):
        group.add_parsers(sub)
    return parser


TRAINING = ("train", "experiment", "distill")  # run under jemalloc where the system has it (training/memory.py)


def main(argv: list[str] | None = None) -> int:
    args = build_parser(__version__).parse_args(argv)
    if args.command == "average" and not args.checkpoints and not args.run:
        print("aiayn: error: average: give --run RUN or checkpoint folders", file=sys.stderr)
        return 2
    try:
        if argv is None and args.command in TRAINING:  # the process's own command line, not a library call
            memory.restart_under_jemalloc()
        return COMMANDS[args.command](args)
    except (UserError, DataError, ValueError, FileNotFoundError) as err:
        print(f"aiayn: error: {_as_flags(str(err), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``aiayn generate ... | head``): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141


def _as_flags(message: str, args: argparse.Namespace) -> str:
    """Library errors name config fields (``max_steps: ...``); point at the flag the user typed too."""
    import re

    given = [k for k, v in vars(args).items() if v is not None and v is not False and k not in ("command", "config")]
    for name in sorted(given, key=len, reverse=True):
        message = re.sub(rf"(?<![\w.-])(field )?{name}(?=: | must )", f"{flag(name)} (field {name})", message)
    return message


if __name__ == "__main__":
    sys.exit(main())
