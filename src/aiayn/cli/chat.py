"""``aiayn chat``: a conversation in the terminal with a chat model (an imported instruct model's template),
each reply streamed. ``/reset``, ``/system TEXT``, ``/exit``; Ctrl-C stops a reply, not the conversation.
Not a terminal on stdin: one user turn a line, so a conversation scripts."""

from __future__ import annotations

import argparse
import itertools
import sys

from aiayn.cli.common import (
    GGUF_CHECKPOINT,
    adapter_hook,
    add_adapter,
    add_compile,
    add_decoding_options,
    add_draft,
    add_precision,
    examples,
    precision_options,
    text_decoding_options,
)
from aiayn.cli.compiling import compile_generator, compile_left, printer
from aiayn.cli.mcp import add_mcp, add_tool_choice, answer_with_tools, start_mcp

HELP = "commands: /reset (forget the conversation), /system TEXT (set the system message), /exit"


def add_parsers(sub) -> None:
    p = sub.add_parser("chat", help="talk to a chat model (an imported instruct model) in the terminal",
                       description="A conversation with a decoder-only checkpoint through its chat template, each "
                                   "reply streamed as it is generated. " + HELP + ". Ctrl-C stops the reply. The "
                                   "oldest turns are dropped when the conversation outgrows the context. With stdin "
                                   "not a terminal, each line is one user turn.",
                       **examples("aiayn chat --checkpoint runs/smollm2",
                                  'aiayn chat --checkpoint runs/smollm2 --system "Answer in one word." --temperature 0',
                                  "aiayn chat --checkpoint runs/smollm2 --adapter runs/ft/best",
                                  "aiayn chat --checkpoint runs/qwen2.5 --mcp mcp.json",
                                  "aiayn chat --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --int4"))
    p.add_argument("--checkpoint", required=True, help=GGUF_CHECKPOINT)
    system = p.add_mutually_exclusive_group()
    system.add_argument("--system", help="the system message (default: the template's own, if it has one)")
    system.add_argument("--system-file", dest="system_file", help="a file whose whole text is the system message")
    p.add_argument("--prompt-file", dest="prompt_file",
                   help="a file whose whole text is the first user turn (then the conversation goes on)")
    p.add_argument("--device", default="cpu")
    add_decoding_options(p)
    add_adapter(p)
    add_precision(p)
    add_compile(p)
    add_draft(p)
    add_mcp(p)
    add_tool_choice(p)


def _turns(interactive: bool):
    """The user's lines: typed at a prompt (Ctrl-C there clears the line), or read from stdin."""
    while True:
        try:
            line = input(">>> ") if interactive else sys.stdin.readline()
        except KeyboardInterrupt:
            print()
            continue
        except EOFError:
            return
        if not interactive and not line:
            return
        yield line.rstrip("\n")


def _read(path: str) -> str:
    """A whole file's text (a missing or unreadable file: the error names it)."""
    from aiayn.data.corpus import read_lines

    return "\n".join(read_lines(path))


def _command(chat, line: str) -> bool:
    """Carry out a /command; False: the conversation ends."""
    name, _, rest = line.partition(" ")
    if name == "/exit":
        return False
    if name == "/reset":
        chat.reset()
        print("(conversation reset)", file=sys.stderr)
    elif name == "/system":
        chat.system = rest.strip() or None
        print(f"(system message {'set' if chat.system else 'removed'})", file=sys.stderr)
    else:
        print(f"(unknown command {name}; {HELP})", file=sys.stderr)
    return True


def chat(args: argparse.Namespace) -> int:
    from aiayn.decoding.config import DecodingConfig

    options = text_decoding_options(args)
    DecodingConfig().replace(**options)  # the options' own check, before loading anything
    tools = start_mcp(args)  # a server that will not start is said before the model loads
    try:
        return _converse(args, options, tools)
    finally:
        if tools is not None:
            tools.close()


def _converse(args: argparse.Namespace, options: dict, tools) -> int:
    from aiayn.inference.chat import Chat
    from aiayn.inference.generator import TextGenerator

    generator = TextGenerator.from_checkpoint(args.checkpoint, args.device, prepare=adapter_hook(args),
                                              draft=args.draft, draft_tokens=args.draft_tokens,
                                              **precision_options(args))
    if tools is not None and not generator.takes_tools:
        raise ValueError("--mcp: this model's chat template takes no tools (Qwen2.5's and Hermes-style templates do)")
    behinds = compile_generator(generator, args)
    write = printer(behinds)
    conversation = Chat(generator, _read(args.system_file) if args.system_file else args.system)
    interactive = sys.stdin.isatty()
    first = [_read(args.prompt_file)] if args.prompt_file else []
    for line in itertools.chain(first, _turns(interactive)):
        if not line.strip():
            continue
        if line.startswith("/"):
            if not _command(conversation, line.strip()):
                break
            continue
        dropped = conversation.dropped
        try:
            if tools is None:
                conversation.reply(line, write, **options)
            else:
                answer_with_tools(conversation, line, tools, args.tool_choice, write, options)
        except KeyboardInterrupt:
            print(" [stopped]", end="")
        except ValueError as err:
            print(f"aiayn: {err}", file=sys.stderr)
            continue
        print()
        if conversation.dropped > dropped:
            print(f"(the conversation outgrew the {generator.model.config.max_len}-token context: the oldest "
                  f"{conversation.dropped - dropped} turn(s) were dropped)", file=sys.stderr)
    compile_left(behinds)
    return 0
