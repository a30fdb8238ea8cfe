"""The ``aiayn`` argument parser: every subcommand, its flags and its help."""

from __future__ import annotations

import argparse

from aiayn.cli_interop import add_interop_parsers


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="train a small translator on a built-in task and show the results",
                       description="The main job: train an encoder-decoder on the number-to-words task "
                                   "(digits -> English words; no download) on the CPU in a few minutes, "
                                   "translate examples and print sacreBLEU. --task copy runs the copy task.")
    p.add_argument("--task", choices=["numbers", "copy"], default="numbers", help="built-in task (default: numbers)")
    p.add_argument("--steps", type=int, help="training steps (default: the task's recipe)")
    p.add_argument("--output", default="runs/demo", help="run folder for the numbers demo (default: runs/demo)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def flag(name: str) -> str:
    """The command-line flag of a recipe field: max_steps -> --max-steps."""
    return "--" + name.replace("_", "-")


def _add_train(sub) -> None:
    """``aiayn train``: --config and --resume, then one flag per TrainConfig field (its help, type and
    choices from the field; default None, so only the flags given override the recipe)."""
    import dataclasses

    from aiayn.training.config import TrainConfig

    p = sub.add_parser("train", help="train a model (translation, lm or mlm) on your data",
                       description="Train from a YAML recipe and/or flags (flags win). DATA is a built-in name "
                                   "(multi30k, tatoeba-cmn, copy, reverse, numbers) or a path: a TSV "
                                   "(source<TAB>target) or a prefix of PREFIX.SRC / PREFIX.TGT files (plain or .gz); "
                                   "for lm / mlm, a plain text file. RUN gets best/, last/ and metrics.jsonl.")
    p.add_argument("--config", help="YAML recipe (see configs/)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its last/ checkpoint "
                   "(with its recipe; flags may change only limits such as --max-steps)")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue  # a mapping: recipe files only
        kind = f.type.split(" |")[0]
        default = getattr(defaults, f.name)
        text = f"{f.metadata['help']} (default: {default})".replace("%", "%%")
        if kind == "bool":
            p.add_argument(flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, help=text)
        else:
            p.add_argument(flag(f.name), dest=f.name, type={"int": int, "float": float}.get(kind, str),
                           choices=f.metadata.get("choices"), help=text)


def _add_translate_evaluate(sub) -> None:
    p = sub.add_parser("translate", help="translate lines from stdin (or --input) to stdout (or --output)",
                       description="Translate one sentence a line with a checkpoint (a run folder means its best/).")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--input", help="file to translate (plain or .gz; default: stdin)")
    p.add_argument("--output", help="file to write (default: stdout)")
    _add_decoding(p)
    e = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU and chrF",
                       description="Translate --src with a checkpoint and score against --ref with sacreBLEU "
                                   "(13a tokenisation, cased, detokenised) and chrF, with their signatures.")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--src", required=True, help="source file (plain or .gz)")
    e.add_argument("--ref", required=True, help="reference file (plain or .gz)")
    e.add_argument("--tokenize", help="sacreBLEU tokenizer, e.g. zh for Chinese output")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--hyp-output", dest="hyp_output", help="also write the translations here")
    e.add_argument("--tokenized-bleu", dest="tokenized_bleu", metavar="LANG",
                   help="also the paper's tokenized BLEU (Moses tokens of LANG, compounds split; needs sacremoses)")
    e.add_argument("--lowercase", action="store_true",
                   help="score case-insensitively (BLEU, chrF and tokenized BLEU; the signature says case:lc)")
    _add_decoding(e)


def _add_decoding(p) -> None:
    p.add_argument("--beam-size", type=int, dest="beam_size", help="beam size; 1 = greedy (default: 4, or 1 "
                   "with --draft)")
    p.add_argument("--length-penalty", type=float, default=1.0, dest="alpha",
                   help="GNMT length penalty alpha (default: 1.0)")
    p.add_argument("--max-len-a", type=float, default=1.5, dest="max_len_a",
                   help="output length limit: a * source tokens + b (default: a 1.5, b 10; the paper: 1 and 50)")
    p.add_argument("--max-len-b", type=int, default=10, dest="max_len_b")
    p.add_argument("--int8", action="store_true", help="dynamic int8 quantization of the linear layers (CPU)")
    p.add_argument("--bf16", action="store_true", help="decode in bfloat16 (about 2x faster on CPUs with bf16 "
                   "instructions; small BLEU cost, see docs/decoding.md)")
    p.add_argument("--draft", help="a smaller checkpoint with the same tokenizers: speculative greedy decoding "
                   "(the same output as greedy; implies --beam-size 1)")
    p.add_argument("--shortlist", help="a lexical shortlist (aiayn shortlist): decode each batch over its candidate "
                   "target tokens only (faster; see docs/decoding.md)")
    p.add_argument("--batch-size", type=int, default=64, dest="batch_size")
    p.add_argument("--device", default="cpu")


def _add_family(sub) -> None:
    g = sub.add_parser("generate", help="continue a prompt with a language model (decoder-only checkpoint)",
                       description="Continue --prompt (or stdin) with a decoder-only checkpoint, streaming the text "
                                   "as it is generated. --temperature 0 is greedy.")
    g.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    g.add_argument("--prompt", help="the text to continue (default: read stdin; empty starts a new document)")
    g.add_argument("--max-new-tokens", type=int, default=200, dest="max_new_tokens")
    g.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default: 1.0)")
    g.add_argument("--top-k", type=int, default=0, dest="top_k", help="keep the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0, dest="top_p", help="nucleus sampling mass (default: 1.0)")
    g.add_argument("--seed", type=int, help="random seed: the same seed gives the same text")
    g.add_argument("--num-samples", type=int, default=1, dest="num_samples")
    g.add_argument("--device", default="cpu")
    f = sub.add_parser("fill-mask", help="the most likely tokens for each <mask> (encoder-only checkpoint)",
                       description="Predict every <mask> of TEXT with an encoder-only (BERT-style) checkpoint.")
    f.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    f.add_argument("text", help='e.g. "a man <mask> a horse ."')
    f.add_argument("--top-k", type=int, default=5, dest="top_k")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.add_argument("--device", default="cpu")


def _add_tools(sub) -> None:
    a = sub.add_parser("average", help="average checkpoints into one (the paper's trick)",
                       description="Average the last K step checkpoints of a run (or the folders given).")
    a.add_argument("--run", help="run folder whose checkpoints/step_* to average")
    a.add_argument("--last", type=int, default=5, help="how many of the newest (default: 5)")
    a.add_argument("checkpoints", nargs="*", help="checkpoint folders (instead of --run)")
    a.add_argument("--output", required=True, help="folder for the averaged checkpoint")
    t = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="tool", required=True)
    tt = t.add_parser("train", help="train a SentencePiece tokenizer on a dataset's training side(s)")
    tt.add_argument("--data", required=True)
    tt.add_argument("--src-lang", dest="src_lang")
    tt.add_argument("--tgt-lang", dest="tgt_lang")
    tt.add_argument("--data-dir", dest="data_dir")
    tt.add_argument("--vocab-size", type=int, default=8000, dest="vocab_size")
    tt.add_argument("--type", choices=["bpe", "unigram", "char"], default="bpe")
    tt.add_argument("--separate", action="store_true", help="separate source and target vocabularies")
    tt.add_argument("--output", required=True, help="folder for tokenizer.model (or .src/.tgt)")
    p = sub.add_parser("plot", help="draw a run's curves (loss, lr, validation BLEU) to PNG")
    p.add_argument("run", help="run folder with metrics.jsonl")
    p.add_argument("--output", help="PNG file (default: RUN/curves.png)")


def _add_show(sub) -> None:
    from aiayn.config import PRESETS

    show = sub.add_parser("show", help="pictures of the inside: attention per head, positions, masks, tensor shapes")
    what = show.add_subparsers(dest="what", required=True)
    a = what.add_parser("attention", help="heatmaps of every layer and head for one sentence",
                        description="Translate SENTENCE (or take --target) and draw encoder self-, decoder self- "
                                    "and cross-attention as a grid of layers x heads, tokens on the axes.")
    a.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    a.add_argument("sentence", help="the source sentence")
    a.add_argument("--target", help="target sentence to force (default: the model's own translation)")
    a.add_argument("--kind", choices=["all", "encoder", "decoder_self", "cross"], default="all")
    a.add_argument("--output", default="attention.png", help="PNG, SVG or PDF file (default: attention.png)")
    a.add_argument("--device", default="cpu")
    p = what.add_parser("positions", help="the sinusoidal encoding matrix and its position dot products")
    p.add_argument("--d-model", type=int, default=128, dest="d_model")
    p.add_argument("--length", type=int, default=100, help="number of positions")
    p.add_argument("--output", default="positions.png", help="PNG, SVG or PDF file (default: positions.png)")
    m = what.add_parser("mask", help="a mask matrix (causal, padding, cross) as text, or a picture with --output",
                        description="Rows are queries, columns keys; 1 = may attend (built by aiayn.masks).")
    m.add_argument("--kind", choices=["causal", "padding", "cross"], default="causal")
    m.add_argument("--length", type=int, default=6, help="tokens (the queries; for cross the target's)")
    m.add_argument("--pad", type=int, default=0, help="how many of the last keys are padding (default: 0)")
    m.add_argument("--src-length", type=int, dest="src_length", help="cross: source tokens (default: --length)")
    m.add_argument("--output", help="also draw it to this PNG, SVG or PDF file")
    s = what.add_parser("shapes", help="the tensor shapes at every stage of one forward pass, as a table")
    s.add_argument("--preset", choices=list(PRESETS), default="tiny")
    s.add_argument("--vocab-size", type=int, default=1000, dest="vocab_size")
    s.add_argument("--output", help="also write the table to this text file")


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="HTTP server: translation API and a web page that shows attention",
                       description="Serve a checkpoint with FastAPI + uvicorn: POST /translate, POST /attention, "
                                   "GET /health, GET / (web page), OpenAPI docs at /docs.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or run folder")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--beam-size", type=int, default=4, dest="beam_size", help="default beam size (default: 4)")
    p.add_argument("--int8", action="store_true", help="dynamic int8 quantization of the linear layers (CPU)")
    p.add_argument("--bf16", action="store_true", help="decode in bfloat16 (about 2x faster on CPUs with bf16 "
                   "instructions; small BLEU cost, see docs/decoding.md)")
    p.add_argument("--device", default="cpu")
    _add_limits(p)
    p.add_argument("--max-batch", type=int, default=32, dest="max_batch",
                   help="texts decoded together by the dynamic batcher")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, dest="batch_wait_ms",
                   help="how long the batcher waits for more requests")


def _add_limits(p) -> None:
    """One flag per ``Limits`` field (its help and default from the field)."""
    import dataclasses

    from aiayn.serve.limits import Limits

    for f in dataclasses.fields(Limits):
        kind = {"int": int, "float": float}[f.type]
        p.add_argument(flag(f.name), dest=f.name, type=kind, default=f.default,
                       help=f"{f.metadata['help']} (default: {f.default})")


def build_parser(version: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need': train, translate, evaluate.")
    parser.add_argument("--version", action="version", version=f"aiayn {version}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (_add_demo, _add_train, _add_translate_evaluate, _add_family, _add_tools, _add_show, _add_serve):
        add(sub)
    add_interop_parsers(sub)
    return parser
