"""The commands that draw: ``aiayn plot`` (a run's curves) and ``aiayn show`` (attention per head, positions,
masks, tensor shapes); their flags: ``cli_args.py``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def plot(args: argparse.Namespace) -> int:
    from aiayn.plots import plot_run

    for path in plot_run(Path(args.run), args.output):
        print(path)
    return 0


def show(args: argparse.Namespace) -> int:
    if args.what == "positions":
        from aiayn.visual.positions import plot_positions

        print(plot_positions(args.d_model, args.length, args.output))
    elif args.what == "mask":
        from aiayn.visual.figures import check_output
        from aiayn.visual.masks import format_mask, mask_matrix, plot_mask

        if args.output:
            check_output(args.output)
        mask = mask_matrix(args.kind, args.length, args.pad, args.src_length)
        sys.stdout.write(format_mask(mask, args.kind))
        if args.output:
            print(plot_mask(mask, args.kind, args.output))
    elif args.what == "shapes":
        from aiayn.checkpoint import atomic_write_text
        from aiayn.config import ModelConfig
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
