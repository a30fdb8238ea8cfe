"""Slow and greedy clients against a live server: half-sent headers or bodies are cut off in time, and
connections over the cap are refused while the server keeps serving."""

import socket
import time

import httpx


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing the connection, or None if it was still open after ``seconds``."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except TimeoutError:
        return None
    return data


def test_half_sent_headers_are_closed_after_the_read_timeout(live_server):
    url, _ = live_server  # read_timeout_s = 1.0
    sock = _connect(url)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: applic")
    started = time.monotonic()
    assert _closed_within(sock, 8) == b""
    assert 0.5 < time.monotonic() - started < 8
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_half_sent_body_gets_408(live_server):
    url, _ = live_server
    sock = _connect(url)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"text\": \"a")
    answer = _closed_within(sock, 8)
    assert answer is not None and answer.startswith(b"HTTP/1.1 408"), answer


def test_idle_connection_after_a_response_is_closed(live_server):
    url, _ = live_server
    sock = _connect(url)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)
    sock.sendall(b"GET /hea")  # the next request never finishes
    answer = _closed_within(sock, 8)
    assert answer is not None and answer.startswith(b"HTTP/1.1 200")


def test_connections_over_the_cap_are_refused_and_the_server_recovers(live_server):
    url, _ = live_server  # max_connections = 40
    socks = [_connect(url) for _ in range(45)]
    try:
        with httpx.Client(timeout=10) as client:
            status = client.get(f"{url}/health").status_code
        assert status == 503
    finally:
        for sock in socks:
            sock.close()
    time.sleep(0.5)
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_an_idle_keep_alive_connection_is_closed_after_5_s(trained_run):
    """docs/serving.md: with the default limits an idle keep-alive connection is closed after 5 s (not at once,
    not never; a read timeout shorter than 5 s, as the other tests' server has, closes it sooner)."""
    from aiayn.inference.translator import Translator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    from conftest import serving

    app = create_app(Translator.from_checkpoint(trained_run), Limits())
    with serving(app, Limits()) as url:
        sock = _connect(url)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        answer = _closed_within(sock, 15)
        waited = time.monotonic() - started
    assert answer is not None and answer.startswith(b"HTTP/1.1 200"), answer
    assert 4.5 < waited < 9, f"closed after {waited:.1f} s"


def test_a_stream_outlives_the_body_read_timeout():
    """Once the body is in, BodyLimit times nothing: a streamed answer waits on receive() for the client's
    disconnect for as long as it streams (found by the 30-minute soak: streams over 10 s were cut with a 408)."""
    import asyncio

    import pytest
    from fastapi import HTTPException

    from aiayn.serve.http import BodyLimit

    async def run(messages: list[tuple[float, dict]]) -> list[str]:
        seen = []

        async def receive():
            delay, message = messages.pop(0)
            await asyncio.sleep(delay)
            return message

        async def app(scope, receive, send):  # reads its body, then listens for the disconnect as a stream does
            while True:
                message = await receive()
                seen.append(message["type"])
                if message["type"] == "http.disconnect":
                    return

        await BodyLimit(app, max_bytes=100, timeout_s=0.05)({"type": "http", "headers": []}, receive, None)
        return seen

    body = {"type": "http.request", "body": b"{}", "more_body": False}
    late = [(0.0, body), (0.3, {"type": "http.disconnect"})]  # the client leaves 6 timeouts after its body
    assert asyncio.run(run(late)) == ["http.request", "http.disconnect"]
    slow_body = [(0.0, {**body, "more_body": True}), (0.3, body)]  # the body's second part comes too late
    with pytest.raises(HTTPException, match=r"408: request body not received within 0\.05 s"):
        asyncio.run(run(slow_body))
