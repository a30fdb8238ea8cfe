"""The compiled decoding step of ``aiayn generate`` and ``aiayn chat`` (``--compile``): attached, or compiled or
loaded behind the decoding and taken over between two printed tokens (``inference/compile_behind.py``)."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.common import precision_options


def compile_generator(generator, args: argparse.Namespace, tokens: int | None = None) -> list:
    """The compiled decoding steps attached as ``--compile`` says, their lines on standard error (``tokens``: the new
    tokens of a one-off run; None: a session): the model's step (with a draft, a graph for its verifying passes too)
    and a draft model's, for one row. A step not kept yet is compiled behind the decoding, a kept one loaded behind
    it: each :class:`~aiayn.inference.compile_behind.CompileBehind` or ``LoadBehind`` returned, to take over between
    two tokens (:func:`printer`) when it is done."""
    if args.compile == "off":
        return []  # nothing to say, nor Inductor to import
    from aiayn.decoding.drafts import ModelDraft
    from aiayn.inference.compile_behind import compile_behind
    from aiayn.inference.compiled import attach, why_eager
    from aiayn.inference.draft import draft_source

    steps = [(generator.model, {"columns": generator.draft is not None},
              (args.checkpoint, precision_options(args)))]
    if isinstance(generator.draft, ModelDraft):
        steps.append((generator.draft.model, {}, draft_source(args.checkpoint, args.draft, precision_options(args))))
    behinds = []
    for model, graphs, (checkpoint, precision) in steps:
        if tokens is not None and why_eager(model, args.compile, args.device, tokens) is not None:
            attach(model, args.compile, args.device, tokens=tokens)  # eager, saying why where it should
        else:
            behinds.append(compile_behind(model, args.compile, args.device, checkpoint, precision, **graphs))
    return [behind for behind in behinds if behind is not None]


def printer(behinds: list):
    """Each piece of a text printed as it comes (None: nothing printed); each step compiled or loaded behind the
    decoding (:func:`compile_generator`) taken over between two tokens once it is done."""
    def write(piece: str | None) -> None:
        if piece is not None:
            sys.stdout.write(piece)
            sys.stdout.flush()
        for behind in behinds:
            if behind.waiting and behind.done:
                behind.take_over()
    return write


def compile_left(behinds: list) -> None:
    """At the end of a run, a compile behind the decoding not done yet goes on: said on standard error."""
    for behind in behinds:
        if behind.waiting and behind.process is not None:
            print(f"aiayn: the compile behind the decoding goes on (process {behind.process.pid}); the next start "
                  "loads its step", file=sys.stderr)
