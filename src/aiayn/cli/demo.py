"""``aiayn demo``: the main job (a small translator trained on a built-in task)."""

from __future__ import annotations

import argparse

from aiayn.cli.common import UserError, add_overwrite


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="train a small translator on a built-in task and show the results",
                       description="The main job: train an encoder-decoder on the number-to-words task "
                                   "(digits -> English words; no download) on the CPU in a few minutes, "
                                   "translate examples and print sacreBLEU. --task copy runs the copy task.")
    p.add_argument("--task", choices=["numbers", "copy"], default="numbers", help="built-in task (default: numbers)")
    p.add_argument("--steps", type=int, help="training steps (default: the task's recipe)")
    p.add_argument("--output", default="runs/demo", help="run folder for the numbers demo (default: runs/demo)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    add_overwrite(p, "the numbers demo starts its run folder afresh")


def demo(args: argparse.Namespace) -> int:
    from aiayn.training.demo import CopyRecipe, run_demo, run_numbers_demo

    if args.steps is not None and args.steps <= 0:
        raise UserError("--steps: must be a positive integer")
    if args.task == "copy":
        run_demo(steps=args.steps or CopyRecipe.steps, seed=args.seed)
    else:
        run_numbers_demo(output=args.output, steps=args.steps, seed=args.seed, overwrite=args.overwrite)
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_demo(sub)
