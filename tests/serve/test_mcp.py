"""MCP tool servers run by aiayn (``serve/mcp_tools.py``, ``serve/mcp_loop.py``, ``--mcp``): a small server of the
tests' own (``mcp_faults.py``, through the ``mcp`` SDK) started as a child process; on a tiny model with Qwen2.5's
real tokenizer and chat template, a forced call is run by the server and its result fed back, whole and streamed,
through the openai and anthropic clients; a tool that fails, hangs or answers too much is a result the model
reads; a file or a server that is wrong is one line; the children end with the server."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from conftest import qwen_checkpoint, run_main, serving

pytest.importorskip("mcp")
anthropic = pytest.importorskip("anthropic")

FAULTS = Path(__file__).with_name("mcp_faults.py")


TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}  # from PyPI


def mcp_file(folder: Path, **servers) -> Path:
    """An ``mcpServers`` file of ``servers`` (name -> entry); default: the faults server."""
    path = folder / "mcp.json"
    servers = servers or {"faults": {"command": sys.executable, "args": [str(FAULTS)]}}
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def children(parent: int | None = None) -> list[int]:
    """The faults servers running as children of ``parent`` (default: this process; the other test worker's are
    not counted), their process ids; one that has ended but is not reaped yet is not running."""
    parent, found = parent or os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # state, parent, ...
            if int(stat[1]) == parent and stat[0] != "Z" and str(FAULTS).encode() in Path(
                    f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return found


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (not ended, nor ended and waiting to be reaped)."""
    alive = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        except (OSError, IndexError):
            continue
    return alive


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny Qwen2.5 model served with the tools of the faults server and of ``mcp-server-time`` (calls time
    out after 2 s): (/v1 URL, the generator)."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.mcp_tools import McpTools
    from aiayn.serve.server import create_app

    folder = tmp_path_factory.mktemp("mcp")
    both = mcp_file(folder, faults={"command": sys.executable, "args": [str(FAULTS)]}, time=TIME)
    tools = McpTools(both, folder / "logs", timeout_s=2.0, max_chars=200)
    generator = TextGenerator.from_checkpoint(qwen_checkpoint(folder / "ckpt"))
    limits = Limits()
    try:
        with serving(create_app(generator, limits, name="qwen-tiny", mcp=tools), limits) as url:
            yield f"{url}/v1", generator
    finally:
        tools.close()


def forced(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


ASK = [{"role": "user", "content": "Add 2 and 3."}]


def test_a_forced_call_is_run_by_the_server_and_its_result_fed_back(served, monkeypatch):
    url, generator = served
    prompts, render = [], generator.rendered_ids
    monkeypatch.setattr(generator, "rendered_ids", lambda prompt: prompts.append(prompt) or render(prompt))
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    health = openai.OpenAI(base_url=url, api_key="none").get(url.removesuffix("/v1") + "/health", cast_to=object)
    assert health["mcp_tools"] == ["add", "fail", "hang", "huge", "get_current_time", "convert_time"]
    answer = client.chat.completions.create(model="qwen-tiny", messages=ASK, tool_choice=forced("add"),
                                            max_tokens=120, temperature=0)
    message = answer.model_dump()["choices"][0]["message"]
    (call, *_) = message["mcp_calls"]
    given = json.loads(call["arguments"])
    assert call["name"] == "add" and call["result"] == f"the sum is {given['a'] + given['b']}"  # the tool's own sum
    assert not message.get("tool_calls")  # the client is not asked to run what the server ran
    assert len(prompts) == 2 and f"<tool_response>\n{call['result']}\n</tool_response>" in prompts[1]
    plain = client.chat.completions.create(model="qwen-tiny", messages=ASK, tool_choice=forced("add"),
                                           max_tokens=120, temperature=0, stream=True,
                                           stream_options={"include_usage": True})
    chunks = [c.model_dump() for c in plain]
    streamed = [m for c in chunks for ch in c["choices"] for m in (ch["delta"].get("mcp_calls") or [])]
    assert [(m["name"], m["arguments"], m["result"]) for m in streamed] == \
        [(m["name"], m["arguments"], m["result"]) for m in message["mcp_calls"]]
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text == (message["content"] or "")
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finishes == [answer.choices[0].finish_reason] and finishes[0] != "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == answer.usage.completion_tokens
    assert answer.usage.prompt_tokens == sum(len(render(p)) for p in prompts[:2])  # both rounds' prompts


@pytest.mark.parametrize(("tool", "said"), [("fail", "error: "), ("hang", "error: the tool hang did not answer "
                                                                          "within 2 s"),
                                            ("huge", "more characters cut]")])
def test_a_tool_that_fails_hangs_or_answers_too_much_is_a_result_the_model_reads(served, tool, said):
    url, _ = served
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    answer = client.chat.completions.create(model="qwen-tiny", messages=[{"role": "user", "content": "Go."}],
                                            tool_choice=forced(tool), max_tokens=120, temperature=0)
    (call, *_) = answer.model_dump()["choices"][0]["message"]["mcp_calls"]
    assert call["name"] == tool and said in call["result"], call
    if tool == "huge":
        assert len(call["result"]) < 300


def test_a_client_with_its_own_tools_keeps_its_loop_and_anthropic_gets_the_answer(served):
    url, _ = served
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    own = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
        "q": {"type": "string", "maxLength": 5}}, "required": ["q"]}}}]
    answer = client.chat.completions.create(model="qwen-tiny", messages=ASK, tools=own, tool_choice="required",
                                            max_tokens=120, temperature=0)
    message = answer.model_dump()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "lookup" and "mcp_calls" not in message
    assert answer.choices[0].finish_reason == "tool_calls"
    claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="none", max_retries=0)
    reply = claude.messages.create(model="qwen-tiny", max_tokens=120, messages=ASK,
                                   tool_choice={"type": "tool", "name": "add"},
                                   extra_body={"temperature": 0})
    assert reply.stop_reason != "tool_use" and not [b for b in reply.content if b.type == "tool_use"]
    again = client.chat.completions.create(model="qwen-tiny", messages=ASK, tool_choice=forced("add"),
                                           max_tokens=120, temperature=0)
    assert reply.content[-1].text == again.choices[0].message.content  # the same loop's answer, after its call
    response = client.responses.create(model="qwen-tiny", input=ASK[0]["content"], max_output_tokens=120,
                                       tool_choice={"type": "function", "name": "add"}, temperature=0)
    assert response.output_text == again.choices[0].message.content  # /v1/responses: the same loop
    assert not [item for item in response.output if item.type == "function_call"]
    (ran,) = [item for item in response.output if item.type == "mcp_call"]  # OpenAI's remote MCP call item
    given = json.loads(ran.arguments)
    assert (ran.name, ran.server_label, ran.output, ran.error) == ("add", "faults", f"the sum is {sum(given.values())}",
                                                                   None)
    events = client.responses.create(model="qwen-tiny", input=ASK[0]["content"], max_output_tokens=120,
                                     tool_choice={"type": "function", "name": "add"}, temperature=0, stream=True)
    done = [e.item for e in events if e.type == "response.output_item.done"]  # (incomplete: the length ran out)
    assert [item.type for item in done] == [item.type for item in response.output] and done[0].output == ran.output
    with pytest.raises(openai.BadRequestError, match="n: "):
        client.chat.completions.create(model="qwen-tiny", messages=ASK, n=2, max_tokens=5)


def test_an_mcp_file_or_server_that_is_wrong_is_one_line(tmp_path):
    from aiayn.serve.mcp_tools import McpTools, read_config

    bad = {"not json": "{", "no servers": "{}",
           "an sse url": '{"mcpServers": {"web": {"url": "http://x", "type": "sse"}}}',
           "args": '{"mcpServers": {"s": {"command": "x", "args": "a b"}}}'}
    for what, text in bad.items():
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match=r"^--mcp .*bad\.json: ") as err:
            read_config(tmp_path / "bad.json")
        assert "\n" not in str(err.value), what
    path = mcp_file(tmp_path, faults={"command": sys.executable, "args": [str(FAULTS)]},
                    gone={"command": str(tmp_path / "no-such-program")})
    before = children()
    with pytest.raises(ValueError, match=r"server 'gone' did not start: .*No such file"):
        McpTools(path, tmp_path / "logs")
    assert children() == before  # the servers started before it are stopped
    done = run_main("chat", "--checkpoint", str(tmp_path / "none"), "--mcp", str(path))
    assert done.returncode == 2 and "server 'gone' did not start" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_chat_runs_the_call_a_turn_forces_and_its_servers_end_with_it(tmp_path):
    checkpoint, path, before = qwen_checkpoint(tmp_path / "ckpt"), mcp_file(tmp_path), children()
    common = ["chat", "--checkpoint", str(checkpoint), "--mcp", str(path), "--temperature", "0",
              "--max-new-tokens", "40", "--compile", "off"]
    done = run_main(*common, "--tool-choice", "add", stdin="Add 2 and 3.\n")
    assert done.returncode == 0, done.stderr
    assert "aiayn: MCP server faults: 4 tool(s): add, fail, hang, huge" in done.stderr
    ran = done.stderr.split("\n[add ", 1)[1].split("]", 1)[0]  # [add {"a": A, "b": B} -> the sum is A+B]
    given, result = ran.split(" -> ")
    assert result == f"the sum is {sum(json.loads(given).values())}" and "<tool_call>" in done.stdout
    assert children() == before
    wrong = run_main(*common, "--tool-choice", "subtract", stdin="Go.\n")
    assert wrong.returncode == 2 and "--tool-choice subtract: no such tool; the tools are add, fail" in wrong.stderr
    assert children() == before


def test_serve_ends_its_mcp_servers_when_it_is_stopped(tmp_path):
    from conftest import wait_until_serving

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint",
                             str(qwen_checkpoint(tmp_path / "ckpt")), "--port", str(port), "--mcp",
                             str(mcp_file(tmp_path)), "--compile", "off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc)
        started = children(proc.pid)  # the server's own child
        assert len(started) == 1
        health = httpx.get(f"http://127.0.0.1:{port}/health").json()
        assert health["mcp_tools"] == ["add", "fail", "hang", "huge"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "aiayn: MCP server faults: 4 tool(s)" in err and running(started) == []


def test_a_real_mcp_server_from_pypi_answers_the_models_call_through_both_clients(served, tmp_path):
    """``mcp-server-time``: asked directly, it tells Tokyo's time; called by the model (a random one: the
    timezone it writes is not one), its own error comes back in the result, and the answer after it is the same
    through the openai and the anthropic client, whole and streamed."""
    from aiayn.serve.mcp_tools import McpTools

    url, _ = served
    tools = McpTools(mcp_file(tmp_path, time=TIME), tmp_path / "logs")
    try:
        told = json.loads(tools.call("get_current_time", '{"timezone": "Asia/Tokyo"}').result())
    finally:
        tools.close()
    assert told["timezone"] == "Asia/Tokyo" and told["datetime"].endswith("+09:00")
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    ask = [{"role": "user", "content": "What time is it in Tokyo?"}]
    answer = client.chat.completions.create(model="qwen-tiny", messages=ask, tool_choice=forced("get_current_time"),
                                            max_tokens=60, temperature=0)
    (call, *_) = answer.model_dump()["choices"][0]["message"]["mcp_calls"]
    assert call["name"] == "get_current_time" and "timezone" in json.loads(call["arguments"])
    assert call["result"].startswith("error: ") and "Invalid timezone" in call["result"]  # the server's own words
    claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="none", max_retries=0)
    with claude.messages.stream(model="qwen-tiny", max_tokens=60, messages=ask, extra_body={"temperature": 0},
                                tool_choice={"type": "tool", "name": "get_current_time"}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == answer.choices[0].message.content and final.usage.output_tokens == answer.usage.completion_tokens


def test_a_forced_reply_with_log_probabilities_streams_strict_json(served):
    """A grammar's forbidden alternatives have log-probability -inf, which JSON cannot hold (a browser's JSON.parse
    refused ``-Infinity``): they are OpenAI's floor, -9999."""
    from aiayn.serve.logprobs import FLOOR

    url, _ = served

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    body = {"model": "qwen-tiny", "messages": ASK, "tool_choice": forced("add"), "max_tokens": 60, "temperature": 0,
            "logprobs": True, "top_logprobs": 5, "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as response:
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: {")]
    chunks = [json.loads(event, parse_constant=refuse) for event in events]
    alternatives = [a["logprob"] for c in chunks for ch in c["choices"] for t in (ch.get("logprobs") or {}).get(
        "content") or [] for a in t["top_logprobs"]]
    assert FLOOR in alternatives  # the forced call's masked alternatives


def test_the_docs_config_starts_and_their_snippet_runs_as_written(served, tmp_path):
    """docs/serving.md's ``mcpServers`` file (its ``python`` this interpreter) starts the time server, and its
    client snippet gets a call the server ran."""
    from aiayn.serve.mcp_tools import McpTools

    from conftest import run_client_snippet

    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    config = json.loads(doc.split("<!-- mcp:config -->\n```json\n", 1)[1].split("```", 1)[0])
    config["mcpServers"]["time"]["command"] = sys.executable
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    tools = McpTools(tmp_path / "mcp.json", tmp_path / "logs")
    tools.close()
    assert sorted(tools.owner) == ["convert_time", "get_current_time"]
    ran = run_client_snippet("mcp", served[0], "qwen-tiny")
    assert [c["name"] for c in ran["message"]["mcp_calls"]][:1] == ["get_current_time"]


def test_anthropic_clients_see_the_calls_the_server_ran_as_mcp_blocks(served):
    """/v1/messages gives each call the server ran as Anthropic's MCP connector does: an ``mcp_tool_use`` block
    (its server's name) and an ``mcp_tool_result`` block, before the text, whole and streamed; the beta client reads
    them typed, the plain one reads the answer around them."""
    url, _ = served
    claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="none", max_retries=0)
    ask = dict(model="qwen-tiny", max_tokens=120, messages=ASK, tool_choice={"type": "tool", "name": "add"},
               extra_body={"temperature": 0})
    whole = claude.beta.messages.create(**ask)
    use, result = whole.content[0], whole.content[1]
    assert (use.type, use.name, use.server_name, result.type) == ("mcp_tool_use", "add", "faults", "mcp_tool_result")
    assert result.tool_use_id == use.id and result.is_error is False
    assert result.content[0].text == f"the sum is {use.input['a'] + use.input['b']}"
    with claude.beta.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == [b.type for b in whole.content]
    assert streamed.content[1].content[0].text == result.content[0].text
    plain = claude.messages.create(**ask)
    assert plain.content[-1].type == "text" and plain.content[-1].text == whole.content[-1].text


def test_a_url_entry_reaches_a_running_server_over_streamable_http(tmp_path):
    """``{"url": ..., "headers": ...}``: a server already running (the faults server over streamable HTTP) is
    spoken to, not started; its tools and calls are as a stdio server's; an SSE entry or a bad url is one line."""
    from aiayn.serve.mcp_tools import McpTools

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    running = subprocess.Popen([sys.executable, str(FAULTS), str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        tools = McpTools(mcp_file(tmp_path, remote={"url": url, "headers": {"X-Test": "1"}}), tmp_path / "logs")
        try:
            assert sorted(tools.owner) == ["add", "fail", "hang", "huge"]
            assert tools.call("add", '{"a": 2, "b": 40}').result() == "the sum is 42"
        finally:
            tools.close()
        assert running.poll() is None  # not ours to stop
    finally:
        running.kill()
        running.wait()
    for entry, said in (({"url": url, "type": "sse"}, "SSE transport"), ({"url": "ftp://x"}, "http or https")):
        with pytest.raises(ValueError, match=said):
            McpTools(mcp_file(tmp_path, remote=entry), tmp_path / "logs")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
