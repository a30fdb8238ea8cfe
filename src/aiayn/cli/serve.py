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
                                  "aiayn serve --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --int4"))
    p.add_argument("--checkpoint", required=True, help=GGUF_CHECKPOINT)
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


def add_parsers(sub) -> None:
    """This group's commands on the ``aiayn`` parser."""
    _add_serve(sub)
