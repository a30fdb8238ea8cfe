"""The ``aiayn`` command line. User mistakes end with a one-line message and exit code 2."""

from __future__ import annotations

import argparse
import sys

from aiayn import __version__
from aiayn.demo import CopyRecipe, run_demo


class UserError(Exception):
    """A mistake in the user's input: reported in one line, no traceback."""


def _demo(args: argparse.Namespace) -> int:
    if args.steps <= 0:
        raise UserError("--steps: must be a positive integer")
    run_demo(steps=args.steps, seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need': train, translate, look inside.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = sub.add_parser("demo", help="train a tiny encoder-decoder on the copy task and show the results",
                          description="Train a tiny encoder-decoder on the built-in copy task on the CPU "
                                      "(under a minute), then greedy-decode new sequences.")
    demo.add_argument("--steps", type=int, default=CopyRecipe.steps,
                      help=f"training steps (default: {CopyRecipe.steps})")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserError, ValueError, FileNotFoundError) as err:
        print(f"aiayn: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
