"""A small MCP tool server of the tests' own (stdio, through the ``mcp`` SDK): one tool that works, and one for
each fault a tool can have (it fails, it hangs, it answers too much). Run as ``python mcp_faults.py`` (stdio) or
``python mcp_faults.py PORT`` (streamable HTTP)."""

import sys
import time
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

server = MCPServer("faults")


@server.tool()
def add(a: Annotated[int, Field(ge=0, le=99)], b: Annotated[int, Field(ge=0, le=99)]) -> str:
    """Add two integers."""
    return f"the sum is {a + b}"


@server.tool()
def fail(reason: Annotated[str, Field(max_length=8)]) -> str:
    """Always fails, saying why."""
    raise RuntimeError(f"failed on purpose: {reason}")


@server.tool()
def hang(seconds: Annotated[int, Field(ge=5, le=9)]) -> str:
    """Answers after ``seconds``."""
    time.sleep(seconds)
    return "late"


@server.tool()
def huge(size: Annotated[int, Field(ge=1, le=9)]) -> str:
    """Answers at least a million characters."""
    return "x" * (1_000_000 + min(size, 10))


if __name__ == "__main__":  # stdio; or with a port, streamable HTTP at http://127.0.0.1:PORT/mcp
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
