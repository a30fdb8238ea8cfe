"""``--mcp FILE`` of ``aiayn serve`` and ``aiayn chat``: MCP tool servers (``serve/mcp_tools.py``) started once,
at start-up, before the model is loaded (a server that will not start says so at once, in one line)."""

from __future__ import annotations

import sys


def add_mcp(p) -> None:
    """--mcp FILE and --mcp-timeout: the tools of MCP servers, offered to the model and run by aiayn."""
    p.add_argument("--mcp", metavar="FILE",
                   help="an mcpServers JSON file (Claude Desktop's, Cursor's and llama.cpp's format): each stdio "
                        "server is started as a child process, its tools offered to the model, each call the model "
                        "makes run and its result fed back until it answers (docs/serving.md, MCP)")
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
    for entry in tools.entries:
        names = [n for n, owner in tools.owner.items() if owner == entry.name]
        print(f"aiayn: MCP server {entry.name}: {len(names)} tool(s): {', '.join(names) or 'none'}", file=sys.stderr)
    return tools
