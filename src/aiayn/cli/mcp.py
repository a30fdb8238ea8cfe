"""``--mcp FILE`` of ``aiayn serve`` and ``aiayn chat``: MCP tool servers (``serve/mcp_tools.py``) started once,
at start-up, before the model is loaded (a server that will not start says so at once, in one line)."""

from __future__ import annotations

import json
import sys


def add_mcp(p) -> None:
    """--mcp FILE and --mcp-timeout: the tools of MCP servers, offered to the model and run by aiayn."""
    p.add_argument("--mcp", metavar="FILE",
                   help="an mcpServers JSON file (Claude Desktop's, Cursor's and llama.cpp's format): each stdio "
                        "server is started as a child process (a url entry: a running server, over streamable "
                        "HTTP), its tools offered to the model, each call the model makes run and its result fed "
                        "back until it answers (docs/serving.md, MCP)")
    p.add_argument("--mcp-timeout", type=float, default=60.0, dest="mcp_timeout", metavar="S",
                   help="seconds a tool call may take; a later answer is an error the model reads (default: 60)")


def start_mcp(args):
    """The servers of ``--mcp``, started (None without it); a line naming each and its tools."""
    if not getattr(args, "mcp", None):
        return None
    from aiayn.io.files import cache_dir
    from aiayn.serve.mcp_tools import McpTools

    if args.mcp_timeout <= 0:
        raise ValueError(f"--mcp-timeout {args.mcp_timeout:g}: give a number of seconds above 0")
    try:
        import mcp  # noqa: F401 - the SDK is an optional extra
    except ImportError:
        raise ValueError("--mcp: the MCP SDK is not installed; pip install 'aiayn[mcp]'") from None
    tools = McpTools(args.mcp, cache_dir() / "mcp", timeout_s=args.mcp_timeout)
    choice = getattr(args, "tool_choice", "auto")
    if choice not in ("auto", "required", "none", *tools.owner):
        tools.close()
        raise ValueError(f"--tool-choice {choice}: no such tool; the tools are {', '.join(sorted(tools.owner))}")
    for entry in tools.entries:
        names = [n for n, owner in tools.owner.items() if owner == entry.name]
        print(f"aiayn: MCP server {entry.name}: {len(names)} tool(s): {', '.join(names) or 'none'}", file=sys.stderr)
    return tools


def add_tool_choice(p) -> None:
    p.add_argument("--tool-choice", dest="tool_choice", default="auto", metavar="auto|required|none|TOOL",
                   help="with --mcp, each turn's first reply: the model chooses (auto, the default), calls a tool "
                        "(required), calls the tool named, or calls none; later replies of the turn choose freely")


def answer_with_tools(conversation, text: str, tools, choice: str, write, options: dict) -> str:
    """One user turn of ``aiayn chat --mcp``: the model's replies until one makes no call, each call it makes
    run by its server (a line on standard error names it and its result) and fed back as a ``tool`` message. The
    first reply's calls follow ``choice`` (a grammar, ``serve/tools.py``), later ones are free; at most
    ``ROUNDS`` replies (the last offers no tools)."""
    from aiayn.serve.choices import Calls
    from aiayn.serve.mcp_loop import ROUNDS, round_choice

    generator, names = conversation.generator, set(tools.owner)
    for r in range(ROUNDS):
        chosen = round_choice(choice, r)
        if chosen not in ("auto", "required", "none"):
            chosen = {"type": "function", "function": {"name": chosen}}
        calls = Calls(tools.specs, chosen, generator.tokenizer, generator.template)
        conversation.tools = None if chosen == "none" else tools.specs
        answer = conversation.reply(text if r == 0 else None, write, **options, grammar=calls.grammar())
        content, made = calls.parser.parse(answer, names)
        if not made or chosen == "none":
            return answer
        conversation.messages[-1] = {"role": "assistant", "content": content or "", "tool_calls": [
            {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}} for c in made]}
        for call in made:
            result = tools.call(call["function"]["name"], call["function"]["arguments"]).result()
            print(f"\n[{call['function']['name']} {call['function']['arguments']} -> {result}]", file=sys.stderr)
            conversation.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return answer
