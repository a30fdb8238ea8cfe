"""``aiayn translate``, ``evaluate``, ``generate`` and ``fill-mask``: using a checkpoint."""

from __future__ import annotations

import argparse
import json
import sys

from aiayn.cli.common import (
    GGUF_CHECKPOINT,
    UserError,
    adapter_hook,
    add_adapter,
    add_compile,
    add_decoding,
    add_decoding_options,
    add_draft,
    add_overwrite,
    add_precision,
    add_tensor_parallel,
    claim,
    examples,
    leader_only,
    leader_reads,
    precision_options,
    read_input,
    start_parallel,
    text_decoding_options,
    translator_from_args,
    warn_truncated,
    write_output,
)
from aiayn.cli.compiling import compile_generator, compile_left, printer


def _add_translate_evaluate(sub) -> None:
    p = sub.add_parser("translate", help="translate lines from stdin (or --input) to stdout (or --output)",
                       description="Translate one sentence a line with a checkpoint (a run folder means its best/).",
                       **examples('echo "Ein Hund rennt." | aiayn translate --checkpoint runs/m30k',
                                  "aiayn translate --checkpoint runs/m30k --input test.de --output test.en",
                                  "aiayn translate --checkpoint runs/m30k --beam-size 4 --length-penalty 0.6 --int8",
                                  "aiayn translate --checkpoint runs/opus-de-en --adapter runs/lora/best"))
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--input", help="file to translate (plain or .gz; default: stdin)")
    p.add_argument("--output", help="file to write (default: stdout)")
    add_overwrite(p)
    add_decoding(p)
    add_tensor_parallel(p)
    e = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU and chrF",
                       description="Translate --src with a checkpoint and score against --ref with sacreBLEU "
                                   "(13a tokenisation, cased, detokenised) and chrF, with their signatures.")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--src", required=True, help="source file (plain or .gz)")
    e.add_argument("--ref", required=True, help="reference file (plain or .gz)")
    e.add_argument("--tokenize", help="sacreBLEU tokenizer, e.g. zh for Chinese output")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--hyp-output", dest="hyp_output", help="also write the translations here")
    add_overwrite(e, "--hyp-output")
    e.add_argument("--tokenized-bleu", dest="tokenized_bleu", metavar="LANG",
                   help="also the paper's tokenized BLEU (Moses tokens of LANG, compounds split; needs sacremoses)")
    e.add_argument("--lowercase", action="store_true",
                   help="score case-insensitively (BLEU, chrF and tokenized BLEU; the signature says case:lc)")
    add_decoding(e)


def _add_family(sub) -> None:
    g = sub.add_parser("generate", help="continue a prompt with a language model (decoder-only checkpoint)",
                       description="Continue --prompt (or stdin) with a decoder-only checkpoint, streaming the text "
                                   "as it is generated. --temperature 0 is greedy.",
                       **examples('aiayn generate --checkpoint runs/shakespeare --prompt "ROMEO:" --temperature 0.8 '
                                  "--seed 1",
                                  'aiayn generate --checkpoint runs/smollm2 --prompt "The capital of France is" '
                                  "--temperature 0 --int4",
                                  "aiayn generate --checkpoint runs/smollm2 --json-schema person.json --prompt "
                                  '"A person as JSON:"'))
    g.add_argument("--checkpoint", required=True, help=GGUF_CHECKPOINT)
    source = g.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="the text to continue (default: read stdin; empty starts a new document)")
    source.add_argument("--prompt-file", dest="prompt_file", help="a file whose whole text is the prompt (UTF-8)")
    g.add_argument("--device", default="cpu")
    add_tensor_parallel(g)
    add_decoding_options(g)
    add_adapter(g)
    add_precision(g)
    add_compile(g)
    add_draft(g)
    g.add_argument("--verbose", action="store_true", help="say on standard error which kernels the linear layers "
                   "run on this CPU (the path --int8, --int4 and --bf16 chose)")
    f = sub.add_parser("fill-mask", help="the most likely tokens for each <mask> (encoder-only checkpoint)",
                       description="Predict every <mask> of TEXT with an encoder-only (BERT-style) checkpoint.")
    f.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    f.add_argument("text", help='e.g. "a man <mask> a horse ."')
    f.add_argument("--top-k", type=int, default=5, dest="top_k")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.add_argument("--device", default="cpu")
    add_adapter(f)
    e = sub.add_parser("embed", help="one vector per input line (encoder-only checkpoint: BERT, sentence-transformers)",
                       description="Embed each line of --input (or stdin) with an encoder-only checkpoint, pooled as "
                                   "the checkpoint says (an imported sentence-transformers folder's pooling and "
                                   "normalisation; mean pooling otherwise). --output F.npy writes a float32 (N, D) "
                                   "array, F.jsonl (or stdout) one JSON list per line.")
    e.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    e.add_argument("--input", help="text file, one text per line (default: stdin)")
    e.add_argument("--output", help="F.npy or F.jsonl (default: JSON lines on stdout)")
    e.add_argument("--batch-size", type=int, default=32, dest="batch_size")
    e.add_argument("--device", default="cpu")
    add_tensor_parallel(e)
    add_overwrite(e)


def translate(args: argparse.Namespace) -> int:
    start_parallel(args)
    if leader_only(args):
        claim(args.output, "translate", args)
    lines = leader_reads(args, lambda: read_input(args.input))
    translator = translator_from_args(args)
    hypotheses = translator.translate(lines, args.batch_size)
    if not leader_only(args):
        return 0
    write_output(hypotheses, args.output)
    warn_truncated(translator, args.input or "<stdin>")
    if translator.draft is not None:
        print(translator.speculative.summary(), file=sys.stderr)
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from aiayn.data.corpus import read_lines
    from aiayn.evaluation import score

    claim(args.hyp_output, "evaluate", args)
    sources, refs = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(refs):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(refs)}")
    if not sources:
        raise UserError(f"{args.src}: no lines to translate; give a test set with at least one sentence")
    translator = translator_from_args(args)
    hyps = translator.translate(sources, args.batch_size)
    warn_truncated(translator, args.src)
    if args.hyp_output:
        write_output(hyps, args.hyp_output)
    result = score(hyps, refs, args.tokenize, args.lowercase)
    extra = {"truncated_lines": len(translator.truncated), "decoding": translator.decoding.to_dict()}
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


def generate(args: argparse.Namespace) -> int:
    from aiayn.decoding.config import DecodingConfig
    from aiayn.inference.generator import TextGenerator

    options = text_decoding_options(args)
    DecodingConfig().replace(**options)  # the options' own check, before loading anything
    start_parallel(args)
    prompt = args.prompt if args.prompt is not None else leader_reads(args, lambda: "\n".join(read_input(
        args.prompt_file)))
    generator = TextGenerator.from_checkpoint(args.checkpoint, args.device, prepare=adapter_hook(args),
                                              draft=args.draft, draft_tokens=args.draft_tokens,
                                              **precision_options(args))
    if args.verbose:
        say_kernels(generator.model)
    decoding = generator.decoding.replace(**options).resolve(generator.model.config)
    behinds = compile_generator(generator, args, tokens=decoding.max_new_tokens * decoding.num_return_sequences)
    dropped = len(generator.tokenizer.encode(prompt)) - len(generator.prompt_ids(prompt))
    if dropped > 0:
        print(f"aiayn: the prompt's first {dropped} tokens were dropped: the model's context is "
              f"{generator.model.config.max_len} tokens", file=sys.stderr)

    write, stream = printer(behinds), decoding.num_return_sequences == 1
    texts = generator.generate(prompt, decoding=decoding, on_text=lambda sample, text: write(text if stream else None))
    if stream:
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join(f"{text}\n---\n" for text in texts))
    if generator.draft is not None:
        print(generator.speculative.summary(), file=sys.stderr)
    compile_left(behinds)
    return 0


def say_kernels(model) -> None:
    """--verbose: the path the precision flags chose on this CPU, on standard error."""
    from aiayn.inference.precision import kernels
    from aiayn.model.cpu import exact_int8_dot, native_bf16

    yes = {True: "yes", False: "no"}
    print(f"aiayn: this CPU: native bfloat16 {yes[native_bf16()]}, exact int8 dot products {yes[exact_int8_dot()]}",
          file=sys.stderr)
    for path, count in kernels(model).items():
        kind = "table(s)" if path.startswith("token table") else "linear layer(s)"
        print(f"aiayn: {count} {kind}: {path}", file=sys.stderr)


def fill_mask(args: argparse.Namespace) -> int:
    from aiayn.inference.fill_mask import MaskFiller

    if args.top_k < 1:
        raise UserError("--top-k: must be a positive integer")
    masks = MaskFiller.from_checkpoint(args.checkpoint, args.device, adapter_hook(args)).fill(args.text, args.top_k)
    if args.json:
        print(json.dumps({"masks": [[{"token": c.token, "id": c.token_id, "probability": round(c.probability, 4)}
                                     for c in cands] for cands in masks]}, ensure_ascii=False))
        return 0
    for n, cands in enumerate(masks, start=1):
        print(f"<mask> {n}: " + "  ".join(f"{c.token.strip() or repr(c.token)} {c.probability:.3f}" for c in cands))
    return 0


def embed(args: argparse.Namespace) -> int:
    from aiayn.inference.embed import Embedder

    if args.output and not args.output.endswith((".npy", ".jsonl")):
        raise UserError(f"--output {args.output}: name it F.npy (one float32 array) or F.jsonl (one list per line)")
    if args.batch_size < 1:
        raise UserError("--batch-size: must be a positive integer")
    start_parallel(args)
    if leader_only(args):
        claim(args.output, "embed", args)
    lines = leader_reads(args, lambda: read_input(args.input))
    vectors = Embedder.from_checkpoint(args.checkpoint, args.device, prepare=adapter_hook(args),
                                       batch_size=args.batch_size).embed(lines)
    if not leader_only(args):
        return 0
    if args.output and args.output.endswith(".npy"):
        import numpy as np

        from aiayn.io.files import atomic_path

        with atomic_path(args.output) as tmp:
            np.save(tmp, vectors.numpy())
    else:
        write_output([json.dumps([round(x, 7) for x in row]) for row in vectors.tolist()], args.output)
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_translate_evaluate(sub)
    _add_family(sub)
