"""MCP tool servers run by aiayn (``aiayn serve --mcp FILE``, ``aiayn chat --mcp FILE``): the ``mcpServers`` JSON
that Claude Desktop, Cursor and llama.cpp read, each stdio server started as a child process through the official
``mcp`` SDK (a ``url`` entry: a server already running, spoken to over streamable HTTP with its ``headers``), its
tools offered to the model as OpenAI function specs, a call run and its result turned into the text of a ``tool``
message. The servers live on a thread of their own (one asyncio loop, one task holding each server open); a call
is made from any thread (:meth:`McpTools.call`). A call that fails, outlasts the time limit or answers too much is
a result the model reads, never an exception; the children end with :meth:`McpTools.close`.

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "docs": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer KEY"}}}}
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

CALL_TIMEOUT_S = 60.0  # a tool that answers later is told to the model as an error
START_TIMEOUT_S = 60.0  # a server that has not listed its tools by then does not start
MAX_RESULT_CHARS = 16_000  # a longer result is cut, saying how much was
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a function name OpenAI and Anthropic take (openai_schema's)


@dataclass(frozen=True)
class ServerEntry:
    """One entry of ``mcpServers``: a stdio server's ``command``, ``args``, ``env`` and ``cwd``, or a running
    server's ``url`` (streamable HTTP) and ``headers``."""

    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None


def read_config(path: str | Path) -> list[ServerEntry]:
    """The stdio servers of an ``mcpServers`` file (those marked ``"disabled": true`` left out); a file that is not
    one is a ValueError naming the file and the field."""
    where = f"--mcp {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{where}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ValueError(f'{where}: give {{"mcpServers": {{"NAME": {{"command": ..., "args": [...]}}}}}}')
    return [_entry(where, name, spec) for name, spec in servers.items()
            if not (isinstance(spec, dict) and spec.get("disabled") is True)]


def _entry(where: str, name: str, spec) -> ServerEntry:
    at = f"{where}: mcpServers.{name}"
    if not isinstance(spec, dict):
        raise ValueError(f"{at}: an object with a command")
    if "command" not in spec:
        return _url_entry(at, name, spec)
    args, env, cwd = spec.get("args", []), spec.get("env"), spec.get("cwd")
    if not isinstance(spec["command"], str) or not spec["command"]:
        raise ValueError(f"{at}.command: the program to run, as text")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{at}.args: a list of texts")
    if env is not None and not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ValueError(f"{at}.env: an object of texts")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError(f"{at}.cwd: a folder, as text")
    return ServerEntry(name, spec["command"], list(args), env, cwd)


def _url_entry(at: str, name: str, spec: dict) -> ServerEntry:
    """A running server's entry: its ``url`` (``serverUrl``, Windsurf's name), http(s), and ``headers``."""
    url, headers = spec.get("url", spec.get("serverUrl")), spec.get("headers")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{at}: give a command to run (and args), or the url (http or https) of a running server")
    if spec.get("type") == "sse" or spec.get("transport") == "sse":
        raise ValueError(f"{at}: the SSE transport (MCP's old one) is not spoken; give the streamable HTTP url")
    if headers is not None and not (isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())):
        raise ValueError(f"{at}.headers: an object of texts")
    return ServerEntry(name, url=url, headers=headers)


def result_text(result, max_chars: int = MAX_RESULT_CHARS) -> str:
    """An MCP ``CallToolResult`` as the text of a ``tool`` message: its text blocks (others named by their kind),
    or its structured content; ``error: `` first if the tool says it failed; cut at ``max_chars``."""
    text = "\n".join(_block_text(block) for block in result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return cut(("error: " if result.is_error else "") + text, max_chars)


def _block_text(block) -> str:
    """A content block's text: a text block's, an embedded text resource's, else its kind (an image, audio)."""
    if getattr(block, "text", None) is not None:
        return block.text
    resource = getattr(block, "resource", None)
    if getattr(resource, "text", None) is not None:
        return resource.text
    mime = getattr(block, "mime_type", None)
    return f"[{block.type}{f' ({mime})' if mime else ''}]"


def cut(text: str, max_chars: int) -> str:
    """``text``, or its first ``max_chars`` characters and how many more were cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... {len(text) - max_chars} more characters cut]"


class McpTools:
    """The tools of the servers of one ``mcpServers`` file, each server a child process held open by a task of
    one asyncio loop on a thread of its own. ``specs``: the tools as OpenAI function specs (a name two servers
    both offer, or one no client could call, is a ValueError); ``log``: the folder the servers' standard error
    goes to (one ``NAME.log`` each)."""

    def __init__(self, path: str | Path, log: str | Path, timeout_s: float = CALL_TIMEOUT_S,
                 max_chars: int = MAX_RESULT_CHARS) -> None:
        self.entries, self.timeout_s, self.max_chars = read_config(path), timeout_s, max_chars
        self.where, self.log = f"--mcp {path}", Path(log)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aiayn-mcp", daemon=True)
        self.thread.start()
        self.clients, self.owner, self.specs, self.holders = {}, {}, [], []
        self.stop = asyncio.run_coroutine_threadsafe(_event(), self.loop).result()
        try:
            for entry in self.entries:
                self._start(entry)
        except BaseException:
            self.close()
            raise

    def _start(self, entry: ServerEntry) -> None:
        """One server started and its tools listed, within ``START_TIMEOUT_S`` (else a ValueError naming it)."""
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self.holders.append(asyncio.run_coroutine_threadsafe(self._hold(entry, ready), self.loop))
        try:
            client, tools = ready.result(timeout=START_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise ValueError(f"{self.where}: server {entry.name!r} listed no tools within {START_TIMEOUT_S:g} s "
                             f"(its log: {self.log / (entry.name + '.log')})") from None
        except Exception as err:
            raise ValueError(f"{self.where}: server {entry.name!r} did not start: {_reason(err)} (its log: "
                             f"{self.log / (entry.name + '.log')})") from None
        self.clients[entry.name] = client
        for tool in tools:
            if not NAME.match(tool.name):
                raise ValueError(f"{self.where}: server {entry.name!r} offers a tool named {tool.name!r}; a "
                                 "function name is 1-64 letters, digits, _ or -")
            if tool.name in self.owner:
                raise ValueError(f"{self.where}: servers {self.owner[tool.name]!r} and {entry.name!r} both offer "
                                 f"{tool.name!r}; disable one of them")
            self.owner[tool.name] = entry.name
            self.specs.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description or "", "parameters": tool.input_schema}})

    async def _hold(self, entry: ServerEntry, ready: concurrent.futures.Future) -> None:
        """A server held open (entered and left in this one task, as the SDK's task groups want) until ``stop``."""
        from mcp import Client

        self.log.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log / f"{entry.name}.log", "a", encoding="utf-8") as errlog:
                async with Client(_transport(entry, errlog)) as client:
                    listed = await client.list_tools()
                    ready.set_result((client, listed.tools))
                    await self.stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else RuntimeError("cancelled"))

    def call(self, name: str, arguments: str) -> concurrent.futures.Future:
        """Run the tool ``name`` with ``arguments`` (the model's JSON text): a future of the result's text."""
        return asyncio.run_coroutine_threadsafe(self._call(name, arguments), self.loop)

    async def _call(self, name: str, arguments: str) -> str:
        try:
            given = json.loads(arguments or "{}")
        except ValueError:
            given = None
        if not isinstance(given, dict):
            return "error: the arguments are not a JSON object"
        if name not in self.owner:
            return f"error: no tool named {name!r}"
        try:
            result = await asyncio.wait_for(self.clients[self.owner[name]].call_tool(name, given), self.timeout_s)
        except TimeoutError:
            return f"error: the tool {name} did not answer within {self.timeout_s:g} s"
        except Exception as err:
            return cut(f"error: the tool {name} failed: {_reason(err)}", self.max_chars)
        return result_text(result, self.max_chars)

    def close(self) -> None:
        """Every server's process ended (each task leaves its client, which ends its child), then the loop."""
        if not self.loop.is_running():
            return
        self.loop.call_soon_threadsafe(self.stop.set)
        for holder in self.holders:
            try:
                holder.result(timeout=10)
            except (Exception, concurrent.futures.CancelledError):
                holder.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def _transport(entry: ServerEntry, errlog):
    """The SDK's transport to ``entry``: its child's standard input and output (its errors to ``errlog``), or
    streamable HTTP to its url with its headers."""
    if entry.url is None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=entry.command, args=entry.args, env=entry.env, cwd=entry.cwd)
        return stdio_client(params, errlog=errlog)
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # no timeout of the client's own: a start (START_TIMEOUT_S) and a call (--mcp-timeout) have theirs
    return streamable_http_client(entry.url, http_client=httpx2.AsyncClient(headers=entry.headers or {},
                                                                            timeout=None))


async def _event() -> asyncio.Event:
    return asyncio.Event()  # made on the loop that waits on it


def _reason(err: BaseException) -> str:
    """An exception in one line (a group's first: the SDK's task groups wrap what failed)."""
    while getattr(err, "exceptions", None):  # an exception group
        err = err.exceptions[0]
    return " ".join(str(err).split()) or type(err).__name__
