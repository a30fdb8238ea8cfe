"""Claude Code (npm's ``@anthropic-ai/claude-code``, its print mode) against ``aiayn serve``'s /v1/messages,
offline: one turn end to end, its own 11,000-token system prompt and tools included. The model is a tiny one with
Qwen2.5's tokenizer and template whose every score is 0 (``qwen_checkpoint(flat=True)``), so the server's
``--logit-bias`` and ``--presence-penalty`` say what it answers: "Hello", then the end of its turn."""

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import CLAUDE_CODE, qwen_checkpoint, wait_until_serving


@pytest.mark.long
@pytest.mark.real_files(CLAUDE_CODE)
def test_claude_code_prints_the_answer_of_aiayn_serve(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    checkpoint = qwen_checkpoint(tmp_path / "ckpt", max_len=32_768, flat=True)
    hello, end = "9707", "151645"  # Qwen2.5's "Hello" and <|im_end|>: "Hello" first, then (penalised) the end
    server = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(checkpoint), "--port",
                               str(port), "--model-name", "qwen-tiny", "--compile", "off", "--temperature", "0",
                               "--logit-bias", json.dumps({hello: 2, end: 1}), "--presence-penalty", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # access log: stdout
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", server)
        env = {**os.environ, "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
               "ANTHROPIC_API_KEY": "none", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "ANTHROPIC_DEFAULT_HAIKU_MODEL": "qwen-tiny", "ANTHROPIC_SMALL_FAST_MODEL": "qwen-tiny"}
        done = subprocess.run([str(CLAUDE_CODE), "-p", "Say hello.", "--model", "qwen-tiny", "--max-turns", "1",
                               "--output-format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        server.terminate()
        log, _ = server.communicate(timeout=60)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:], log[-2000:])
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["stop_reason"] == "end_turn" and result["result"] == "Hello"
    assert result["usage"]["input_tokens"] + result["usage"]["cache_read_input_tokens"] > 5_000  # its whole prompt
    assert '"POST /v1/messages?beta=true HTTP/1.1" 200' in log, log[-3000:]  # it did call aiayn
