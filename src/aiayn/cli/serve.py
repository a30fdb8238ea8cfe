"""``aiayn serve``: the HTTP server and its web page."""

from __future__ import annotations

import argparse
import os

from aiayn.cli.common import (
    GGUF_CHECKPOINT,
    adapter_hook,
    add_adapter,
    add_compile,
    add_decoding_options,
    add_draft,
    add_field_flags,
    add_precision,
    add_tensor_parallel,
    decoding_options,
    examples,
    note_emulated_bf16,
    precision_options,
)
from aiayn.cli.mcp import add_mcp, start_mcp


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="HTTP server: translation API and a web page that shows attention",
                       description="Serve a checkpoint with FastAPI + uvicorn: POST /translate, POST /attention, "
                                   "GET /health, GET / (web page), OpenAPI docs at /docs.",
                       **examples("aiayn serve --checkpoint runs/m30k",
                                  "aiayn serve --checkpoint runs/smollm2 --api-key KEY --model-name smollm2",
                                  "aiayn serve --checkpoint runs/smollm2 --lora ft=runs/ft/best",
                                  "aiayn serve --checkpoint runs/smollm2 --draft ngram",
                                  "aiayn serve --checkpoint runs/qwen2.5 --mcp mcp.json",
                                  "aiayn serve --checkpoint runs/m30k --host 0.0.0.0 --port 8080",
                                  "aiayn serve --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --int4",
                                  "aiayn serve --models runs/ --models-max 2 --models-ttl 600"))
    _add_models(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    add_precision(p)
    add_compile(p)
    p.add_argument("--device", default="cpu")
    add_tensor_parallel(p)
    p.add_argument("--model-name", dest="model_name", help="the model's name on the OpenAI-compatible /v1 routes "
                   "(default: the checkpoint folder's name; a .gguf file's without .gguf)")
    p.add_argument("--api-key", dest="api_key", default=os.environ.get("AIAYN_API_KEY"),
                   help="every route but /health then needs the header Authorization: Bearer KEY (default: the "
                        "environment variable AIAYN_API_KEY; unset: no key)")
    _add_limits(p)
    p.add_argument("--max-batch", type=int, default=64, dest="max_batch",
                   help="rows decoded together (a beam request takes beam-size rows); encoder-only: texts per batch")
    p.add_argument("--batching", choices=["continuous", "static"], default="continuous",
                   help="requests join and leave the running batch between steps (continuous), or wait-and-batch "
                        "(static: for comparison)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, dest="batch_wait_ms",
                   help="encoder-only: how long a request waits for others to batch with")
    add_decoding_options(p, skip=("max_new_tokens",))  # --max-new-tokens is the server's limit (Limits)
    add_adapter(p)
    add_draft(p)
    add_mcp(p)
    p.add_argument("--lora", action="append", default=[], metavar="NAME=ADAPTER",
                   help="serve a LoRA adapter folder (PEFT's format) as model NAME beside the base model, unmerged: "
                        "rows of every adapter and of the base decode in one batch (repeat for more)")


def _add_models(p) -> None:
    """--checkpoint or --models DIR, and the budget of the latter: --models-memory, --models-max, --models-ttl,
    --models-pin, --models-wait."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help=GGUF_CHECKPOINT)
    which.add_argument("--models", metavar="DIR", help="serve every checkpoint folder, run folder and .gguf file in "
                       "DIR, each by its name (a request's \"model\"), loaded when first asked for (docs/serving.md)")
    p.add_argument("--models-memory", type=int, metavar="MB", dest="models_memory",
                   help="with --models: the most MiB the loaded models' weights may take; the least recently used "
                        "idle model is unloaded to make room (default: no bound)")
    p.add_argument("--models-max", type=int, metavar="N", dest="models_max",
                   help="with --models: the most models loaded at once (default: no bound)")
    p.add_argument("--models-ttl", type=float, metavar="SECONDS", dest="models_ttl",
                   help="with --models: unload a model idle this long (default: never, until room is needed)")
    p.add_argument("--models-pin", action="append", default=[], metavar="NAME", dest="models_pin",
                   help="with --models: load this model at the start and never unload it (repeat for more)")
    p.add_argument("--models-wait", type=float, default=120.0, metavar="SECONDS", dest="models_wait",
                   help="with --models: how long a request waits for room to load its model (every loaded one busy) "
                        "before 503 busy (default: 120)")


def lora_options(given: list[str], base_name: str | None) -> dict[str, str]:
    """``--lora NAME=ADAPTER`` flags -> {name: folder}; a malformed or repeated name is a one-line error."""
    from aiayn.cli.common import UserError

    found: dict[str, str] = {}
    for item in given:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise UserError(f"--lora {item}: write NAME=ADAPTER_FOLDER")
        if name in found or name == base_name:
            raise UserError(f"--lora {item}: the name {name!r} is taken; give each adapter its own")
        found[name] = folder
    return found


def _add_limits(p) -> None:
    """One flag per ``Limits`` field, defaulting to the field's value."""
    from aiayn.serve.limits import Limits

    add_field_flags(p, Limits, keep_defaults=True)


def serve(args: argparse.Namespace) -> int:
    import dataclasses

    from aiayn.cli.common import start_parallel
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import run_server

    limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
    note_emulated_bf16(args)
    if args.models is not None:
        return _serve_models(args, limits)
    parallel = start_parallel(args)
    tools = start_mcp(args) if parallel is None or parallel.leader else None  # the rank that serves runs them
    try:
        run_server(args.checkpoint, args.host, args.port, limits, decoding=decoding_options(args),
                   **precision_options(args), device=args.device, max_batch=args.max_batch,
                   wait_ms=args.batch_wait_ms, prepare=adapter_hook(args), name=args.model_name, api_key=args.api_key,
                   batching=args.batching, loras=lora_options(args.lora, args.model_name), parallel=parallel,
                   compile=args.compile, draft=args.draft, draft_tokens=args.draft_tokens, mcp=tools)
    finally:
        if tools is not None:
            tools.close()  # the servers' processes end with the server
    return 0


def _serve_models(args: argparse.Namespace, limits) -> int:
    """``aiayn serve --models DIR`` (``serve/models_server.py``): what one model's flags cannot mean for many refused
    in one line."""
    from aiayn.cli.common import UserError
    from aiayn.serve.server import run_models

    for flag, given in (("--lora", args.lora), ("--adapter", args.adapter), ("--draft", args.draft),
                        ("--mcp", args.mcp), ("--model-name", args.model_name),
                        ("--tensor-parallel", getattr(args, "tensor_parallel", False))):
        if given:
            raise UserError(f"--models: {flag} is for one model (--checkpoint); leave it out")
    for flag, value in (("--models-memory", args.models_memory), ("--models-max", args.models_max),
                        ("--models-ttl", args.models_ttl)):
        if value is not None and value <= 0:
            raise UserError(f"{flag} {value:g}: give a positive number")
    pool = {"memory": None if args.models_memory is None else args.models_memory * 2**20, "most": args.models_max,
            "ttl": args.models_ttl, "pinned": tuple(args.models_pin), "wait_s": args.models_wait}
    run_models(args.models, args.host, args.port, limits, args.api_key, pool, options=precision_options(args),
               decoding=decoding_options(args), device=args.device, max_batch=args.max_batch,
               wait_ms=args.batch_wait_ms, batching=args.batching, compile=args.compile)
    return 0


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_serve(sub)
