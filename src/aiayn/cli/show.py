"""``aiayn plot`` (a run's curves) and ``aiayn show`` (attention per head, positions, masks, tensor shapes,
Mask-Predict's refinement, the softmax's saturation, a mixture's routing)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiayn.cli.common import UserError, add_overwrite, claim


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="draw a run's curves (loss, lr, validation BLEU) to PNG")
    p.add_argument("run", help="run folder with metrics.jsonl")
    p.add_argument("--output", help="PNG file (default: RUN/curves.png, the run's own)")
    add_overwrite(p)


def plot(args: argparse.Namespace) -> int:
    from aiayn.io.run import RunFolder
    from aiayn.visual.plots import plot_run

    run = RunFolder(args.run)
    claim(args.output, "plot", args)  # the default, RUN/curves.png, is the run's own: redrawn in place
    for path in plot_run(run.records(), Path(args.output) if args.output else run.path / "curves.png", args.run):
        print(path)
    return 0


def _add_show(sub) -> None:
    show = sub.add_parser("show", help="pictures of the inside: attention per head, positions, masks, tensor shapes")
    what = show.add_subparsers(dest="what", required=True)
    for picture in (*_add_checkpoint_pictures(what), *_add_math_pictures(what)):
        add_overwrite(picture)


def _add_checkpoint_pictures(what) -> tuple:
    """``show attention``, ``refinement``, ``saturation`` and ``experts``: pictures of a trained checkpoint."""
    a = what.add_parser("attention", help="heatmaps of every layer and head for one sentence",
                        description="Translate SENTENCE (or take --target) and draw encoder self-, decoder self- "
                                    "and cross-attention as a grid of layers x heads, tokens on the axes; with a "
                                    "language model, its causal self-attention over SENTENCE.")
    a.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    a.add_argument("sentence", help="the source sentence")
    a.add_argument("--target", help="target sentence to force (default: the model's own translation)")
    a.add_argument("--kind", choices=["all", "encoder", "decoder_self", "cross"], default="all")
    a.add_argument("--output", default="attention.png", help="PNG, SVG or PDF file (default: attention.png)")
    a.add_argument("--device", default="cpu")
    r = what.add_parser("refinement", help="Mask-Predict's iterations, or a CTC model's best path, for one sentence",
                        description="Translate SENTENCE with Mask-Predict and show each iteration: the tokens, "
                                    "their probabilities, and the positions it predicted again (marked *); with a "
                                    "CTC checkpoint, what each upsampled position emits and what the collapse keeps "
                                    "(marked *).")
    r.add_argument("--checkpoint", required=True, help="a CMLM or CTC checkpoint or run folder (aiayn train --task "
                                                       "cmlm or ctc)")
    r.add_argument("sentence", help="the source sentence")
    r.add_argument("--iterations", type=int, help="T (default: the checkpoint's decoding)")
    r.add_argument("--length-beam", type=int, dest="length_beam", help="l (default: the checkpoint's decoding)")
    r.add_argument("--output", help="also draw it to this PNG, SVG or PDF file")
    r.add_argument("--device", default="cpu")
    t = what.add_parser("saturation", help="how saturated each layer's softmax is (why scale by sqrt(d_k))",
                        description="Teacher-force SRC -> REF through each checkpoint and draw, per layer, the share "
                                    "of attention rows whose largest weight exceeds 0.99.")
    t.add_argument("--checkpoint", action="append", required=True, help="NAME=CHECKPOINT (repeat to compare)")
    t.add_argument("--src", required=True, help="source sentences (plain or .gz)")
    t.add_argument("--ref", required=True, help="their references")
    t.add_argument("--sentences", type=int, default=100, help="the first N pairs (default 100)")
    t.add_argument("--output", required=True, help="PNG, SVG or PDF file")
    e = what.add_parser("experts", help="which experts each token goes to, and each expert's load (a mixture of "
                                        "experts)",
                        description="Run TEXT through a language model with experts and print, per layer, the tokens "
                                    "each expert took; with --output, a heatmap of the router's weights (experts x "
                                    "tokens) and the load per expert, layer by layer.")
    e.add_argument("--checkpoint", required=True, help="a language model checkpoint with n_experts (or its run)")
    e.add_argument("text", help="the text to route")
    e.add_argument("--output", help="also draw it to this PNG, SVG or PDF file")
    return a, r, t, e, _add_drafts(what)


def _add_drafts(what):
    """``show drafts``: speculative decoding pass by pass."""
    d = what.add_parser("drafts", help="speculative decoding pass by pass: the guesses kept and refused",
                        description="Decode TEXT greedily with a draft (a language model's continuation, or with "
                                    "--chat its reply; a translator's translation) and print, per pass of the model, "
                                    "the guesses it kept, the one it refused and its own token.")
    d.add_argument("--checkpoint", required=True, help="a language model or translator (checkpoint, run or GGUF)")
    d.add_argument("text", help="the prompt, the user's turn (--chat) or the source sentence")
    d.add_argument("--draft", default="ngram", help="ngram, int4, int8 or a checkpoint with the same tokenizer (a "
                                                    "translator's CTC or CMLM prophet) (default: ngram)")
    d.add_argument("--chat", action="store_true", help="TEXT is a user's turn, rendered by the chat template")
    d.add_argument("--max-new-tokens", type=int, default=60, dest="max_new_tokens")
    d.add_argument("--output", help="also draw it to this PNG, SVG or PDF file")
    return d


def _add_math_pictures(what) -> tuple:
    """``show positions``, ``mask`` and ``shapes``: pictures of the paper's definitions, no checkpoint."""
    from aiayn.model.config import PRESETS

    p = what.add_parser("positions", help="the sinusoidal encoding matrix and its position dot products, or T5's "
                                          "relative position biases (--kind relative)")
    p.add_argument("--kind", choices=["sinusoidal", "relative"], default="sinusoidal",
                   help="sinusoidal (section 3.5) or relative (T5's bias by bucketed offset)")
    p.add_argument("--d-model", type=int, default=128, dest="d_model")
    p.add_argument("--length", type=int, default=100, help="number of positions")
    p.add_argument("--checkpoint", help="relative: draw this T5-shaped checkpoint's trained tables (default: random)")
    p.add_argument("--buckets", type=int, default=32, help="relative, random tables: buckets (default: 32)")
    p.add_argument("--max-distance", type=int, default=128, dest="max_distance",
                   help="relative, random tables: the distance the last bucket starts at (default: 128)")
    p.add_argument("--heads", type=int, default=8, help="relative, random tables: heads (default: 8)")
    p.add_argument("--output", default="positions.png", help="PNG, SVG or PDF file (default: positions.png)")
    m = what.add_parser("mask", help="a mask matrix (causal, padding, cross) as text, or a picture with --output",
                        description="Rows are queries, columns keys; 1 = may attend (built by aiayn.model.masks).")
    m.add_argument("--kind", choices=["causal", "padding", "cross"], default="causal")
    m.add_argument("--length", type=int, default=6, help="tokens (the queries; for cross the target's)")
    m.add_argument("--pad", type=int, default=0, help="how many of the last keys are padding (default: 0)")
    m.add_argument("--src-length", type=int, dest="src_length", help="cross: source tokens (default: --length)")
    m.add_argument("--output", help="also draw it to this PNG, SVG or PDF file")
    s = what.add_parser("shapes", help="the tensor shapes at every stage of one forward pass, as a table")
    s.add_argument("--preset", choices=list(PRESETS), default="tiny")
    s.add_argument("--vocab-size", type=int, default=1000, dest="vocab_size")
    s.add_argument("--output", help="also write the table to this text file")
    return p, m, s


def show(args: argparse.Namespace) -> int:
    claim(args.output, "show", args)
    if args.what == "positions" and args.kind == "relative":
        from aiayn.visual.positions import plot_relative

        print(plot_relative(args.length, args.output, args.checkpoint, args.buckets, args.max_distance, args.heads))
    elif args.what == "positions":
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
        from aiayn.io.files import atomic_write_text
        from aiayn.model.config import ModelConfig
        from aiayn.visual.shapes import format_table, trace_shapes

        config = ModelConfig.preset(args.preset, vocab_size=args.vocab_size)
        table = format_table(trace_shapes(config), config)
        sys.stdout.write(table)
        if args.output:
            atomic_write_text(Path(args.output), table)
    elif args.what == "refinement":
        _show_refinement(args)
    elif args.what == "saturation":
        _show_saturation(args)
    elif args.what == "experts":
        _show_experts(args)
    elif args.what == "drafts":
        _show_drafts(args)
    else:
        _show_attention(args)
    return 0


def _show_experts(args: argparse.Namespace) -> None:
    from aiayn.inference.load import load_checkpoint
    from aiayn.visual.experts import plot_routes, routes_for
    from aiayn.visual.figures import check_output

    if args.output:
        check_output(args.output)
    model, tokenizers = load_checkpoint(args.checkpoint, "decoder-only")
    routes = routes_for(model, tokenizers.src, args.text)
    sys.stdout.write(routes.format())
    if args.output:
        print(plot_routes(routes, args.output))


def _show_drafts(args: argparse.Namespace) -> None:
    """Greedy speculative decoding of the text, each pass of the main model noted (``visual/drafts.py``)."""
    from aiayn.decoding.speculative import SpeculativeStats
    from aiayn.inference.generator import TextGenerator
    from aiayn.inference.load import checkpoint_arch
    from aiayn.inference.translator import Translator
    from aiayn.visual.drafts import drafted_passes, format_drafts, plot_drafts
    from aiayn.visual.figures import check_output

    if args.output:
        check_output(args.output)
    stats, arch = SpeculativeStats(passes=[]), checkpoint_arch(args.checkpoint)
    if arch == "encoder-only":
        raise UserError(f"--checkpoint: {args.checkpoint} is encoder-only; drafts are for models that generate")
    if arch == "encoder-decoder":
        product = Translator.from_checkpoint(args.checkpoint, draft=args.draft, beam_size=1)
        product.speculative = stats
        text = product.translate([args.text], max_new_tokens=args.max_new_tokens)[0]
        tokenizer = product.tokenizers.tgt
    else:
        product = TextGenerator.from_checkpoint(args.checkpoint, draft=args.draft)
        product.speculative = stats
        prompt = product.chat_ids([{"role": "user", "content": args.text}]) if args.chat else args.text
        text = product.generate(prompt, args.max_new_tokens, strategy="greedy")[0]
        tokenizer = product.tokenizer
    found = drafted_passes(stats.passes, lambda t: tokenizer.token_text(t) or tokenizer.pieces([t])[0],
                           product.model.config.end_ids)  # (a special token's text is its piece)
    sys.stdout.write(format_drafts(found) + f"{stats.summary()}\noutput: {text}\n")
    if args.output:
        title = (f"--draft {args.draft}: {stats.accepted} of {stats.proposed} guesses kept; {stats.generated} tokens "
                 f"in {stats.main_passes} passes of the model (plain greedy: one a token)")
        print(plot_drafts(found, args.output, title))


def _show_saturation(args: argparse.Namespace) -> None:
    from aiayn.data.corpus import read_lines
    from aiayn.inference.load import load_checkpoint
    from aiayn.visual.figures import check_output
    from aiayn.visual.saturation import plot_saturation, saturation

    check_output(args.output)
    texts = list(zip(read_lines(args.src), read_lines(args.ref), strict=False))[: args.sentences]
    found = {}
    for given in args.checkpoint:
        name, _, path = given.rpartition("=")
        model, tokenizers = load_checkpoint(path or name, "encoder-decoder")
        pairs = [(tokenizers.src.encode(s), tokenizers.tgt.encode(t)) for s, t in texts]
        found[name or Path(path).name] = shares = saturation(model, [(s, t) for s, t in pairs if s and t])
        print(name or path, {kind: [round(x, 3) for x in layers] for kind, layers in shares.items()})
    print(plot_saturation(found, args.output))


def _show_refinement(args: argparse.Namespace) -> None:
    from aiayn.inference.translator import Translator
    from aiayn.visual.figures import check_output
    from aiayn.visual.refinement import alignment_for, format_refinement, plot_refinement, refinement_for

    if args.output:
        check_output(args.output)
    translator = Translator.from_checkpoint(args.checkpoint, args.device)
    if not translator.model.config.non_autoregressive:
        raise UserError(f"--checkpoint: {args.checkpoint} is autoregressive; refinement is Mask-Predict's or CTC's "
                        "(a CMLM or CTC checkpoint, aiayn train --task cmlm or ctc)")
    if translator.model.config.kind == "ctc":
        found = alignment_for(translator, args.sentence)
    else:
        found = refinement_for(translator, args.sentence, args.iterations, args.length_beam)
    sys.stdout.write(format_refinement(found))
    if args.output:
        print(plot_refinement(found, args.output))


def _show_attention(args: argparse.Namespace) -> None:
    """A translator's three kinds of attention, or a language model's causal self-attention over the text."""
    from aiayn.inference.load import checkpoint_arch, load_checkpoint
    from aiayn.inference.translator import Translator
    from aiayn.visual.attention import KINDS, attention_for, lm_attention_for, plot_attention
    from aiayn.visual.figures import check_output

    check_output(args.output)
    if checkpoint_arch(args.checkpoint) == "decoder-only":
        if args.target or args.kind not in ("all", "decoder_self"):
            raise UserError("--target/--kind: a language model has causal self-attention (decoder_self) only")
        model, tokenizers = load_checkpoint(args.checkpoint)
        maps = lm_attention_for(model.to(args.device), tokenizers.src, args.sentence)
        print(plot_attention(maps, args.output, ("decoder_self",)))
        return
    maps = attention_for(Translator.from_checkpoint(args.checkpoint, args.device), args.sentence, args.target)
    print(f"translation: {maps.translation}")
    print(plot_attention(maps, args.output, KINDS if args.kind == "all" else (args.kind,)))


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_plot(sub)
    _add_show(sub)
