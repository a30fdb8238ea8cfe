"""The chat page in a real browser: Debian's chromium driven by Playwright against a live server (behind an API key)
of a tiny model with a ChatML template: streamed turns with their counts, stop, regenerate, edit and continue, a
reload that keeps the conversation, export and import, the language switch, a reply token opened (its alternatives
and its attention over the conversation), a reply with markup shown as text, a phone-width window, the keyboard."""

import json
import math
import time
from pathlib import Path

import httpx
import pytest

from serve.test_page import browser  # noqa: F401 (the module's chromium)

from conftest import chat_checkpoint, serving

KEY = "page-key-not-secret"
CAP = 60  # tokens /attention takes: a short conversation is shown whole, a longer one its last CAP tokens
UNSAFE = ("Look: <script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 2\"> **bold** `code` *it*\n\n"
          "- one\n- two\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n```python\nprint('<b>hi</b>')\n```\n"
          "[site](https://example.org) [bad](javascript:alert(1))")


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    """A live server of the tiny chat model whose every step takes 15 ms more (so a reply can be stopped midway) and
    whose replies run to their max_tokens; yields (its URL, the generator)."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path_factory.mktemp("chat") / "ckpt", max_len=512))
    decode = generator.model.decode

    def slow(*args, **kwargs):
        time.sleep(0.015)
        return decode(*args, **kwargs)

    generator.model.decode = slow
    # no end of turn before max_tokens: every reply has the length asked, whatever this CPU's random draws are
    generator.decoding = generator.decoding.replace(min_new_tokens=10_000)
    limits = Limits(max_attention_tokens=CAP)
    with serving(create_app(generator, limits, name="tiny-chat", api_key=KEY), limits) as url:
        yield url, generator


def opened(browser, url: str, width: int = 1280, **settings):  # noqa: F811
    """The page in a fresh browser context (nothing stored), its key given, ``settings`` filled in (``max_tokens``:
    the field ``#max-tokens``)."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.on("dialog", lambda dialog: dialog.accept())  # the delete confirmation
    page.goto(url)
    with_key(page)
    for name, value in settings.items():
        page.fill(f"#{name.replace('_', '-')}", str(value))
    return page


def with_key(page) -> None:
    page.wait_for_selector("#key-form:not([hidden])", timeout=30_000)  # asked once, kept in sessionStorage
    page.fill("#key-input", KEY)
    page.press("#key-input", "Enter")
    page.wait_for_function("document.querySelector('#model-name').textContent === 'tiny-chat'", timeout=30_000)


def settle(page, n_assistant: int) -> None:
    """Wait until ``n_assistant`` replies are there and none is streaming."""
    page.wait_for_function(f"document.querySelectorAll('.msg.assistant').length === {n_assistant} && "
                           "document.querySelector('#stop').hidden", timeout=60_000)


def say(page, text: str, n_assistant: int) -> None:
    page.fill("#message", text)
    page.press("#message", "Enter")
    settle(page, n_assistant)


def stored(page) -> list[dict]:
    return page.evaluate("JSON.parse(localStorage.getItem('aiayn-chats'))")


def test_a_conversation_streams_stops_regenerates_edits_and_survives_a_reload(browser, chat_server, tmp_path):  # noqa: F811
    url, generator = chat_server
    # seeded sampling: visible text (this random model's greedy text is blank)
    page = opened(browser, url, temperature=1, seed=7, max_tokens=12)
    page.click("#system-box summary")
    page.fill("#system", "You are terse.")
    say(page, "hello there", 1)
    say(page, "and again", 2)
    chat = stored(page)[0]
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "user", "assistant"]
    for turn, (reply, m) in enumerate(zip(page.locator(".msg.assistant").all(), chat["messages"][1::2], strict=True)):
        assert m["info"]["ids"] and len(m["info"]["ids"]) <= 12 and reply.locator(".msg-body").inner_text().strip()
        stats = reply.locator(".stats").inner_text()
        assert f"{m['info']['usage']['prompt_tokens']} prompt tokens" in stats and "tokens/s" in stats
        # what streamed is the server's answer to the same request, whole; the prompt: the conversation so far,
        # rendered by the server's template
        messages = [{"role": "system", "content": "You are terse."}] + [
            {"role": x["role"], "content": x["content"]} for x in chat["messages"][:2 * turn + 1]]
        whole = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                           json={"model": "tiny-chat", "messages": messages, "temperature": 1, "seed": 7,
                                 "max_tokens": 12}).json()
        assert whole["choices"][0]["message"]["content"] == m["content"]
        want = generator.rendered_ids(generator.chat_template(messages, True))
        assert m["info"]["promptCount"] == len(want) == whole["usage"]["prompt_tokens"]
    assert page.locator("#context").inner_text().startswith("context: ")

    # Stop: a long reply cut midway keeps what came
    page.fill("#max-tokens", "250")
    page.fill("#message", "a long one please")
    page.press("#message", "Enter")
    page.wait_for_function("(document.querySelector('.msg.assistant:last-child .msg-body') || {}).textContent",
                           timeout=30_000)
    page.click("#stop")
    settle(page, 3)
    last = stored(page)[0]["messages"][-1]
    assert last["info"]["stopped"] and 0 < len(last["info"]["ids"]) < 250 and last["content"]
    assert "stopped" in page.locator(".msg.assistant").last.locator(".stats").inner_text()

    # regenerate the last reply: one request, still three replies
    page.fill("#max-tokens", "12")
    with page.expect_request("**/v1/chat/completions"):
        page.click(".msg.assistant:last-child button[aria-label='Regenerate']")
    settle(page, 3)
    assert not stored(page)[0]["messages"][-1]["info"].get("stopped")

    # edit the second user turn: what came after it goes, and the conversation continues from there
    page.click(".msg.user >> nth=1 >> button[aria-label='Edit']")
    page.fill(".msg.user >> nth=1 >> textarea", "edited turn")
    page.click("text=Save and send")
    settle(page, 2)
    assert [m["content"] for m in stored(page)[0]["messages"] if m["role"] == "user"] == ["hello there", "edited turn"]

    # a reload finds the conversation (and the key, kept for this tab)
    page.reload()
    page.wait_for_function("document.querySelector('#model-name').textContent === 'tiny-chat'", timeout=30_000)
    assert page.locator(".msg").count() == 4 and page.locator("#system").input_value() == "You are terse."

    # export it, delete it, import it back
    with page.expect_download() as download:
        page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert exported["messages"][0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in exported["messages"][1:]] == ["user", "assistant", "user", "assistant"]
    page.click("#chat-list li.current button[aria-label='Delete']")
    assert page.locator(".msg").count() == 0
    saved = tmp_path / "chat.json"
    saved.write_text(json.dumps(exported), encoding="utf-8")
    page.set_input_files("#import-file", str(saved))
    page.wait_for_function("document.querySelectorAll('.msg').length === 4")
    assert stored(page)[0]["messages"][1]["content"] == exported["messages"][2]["content"]

    # rename it
    page.click("#chat-list li.current button[aria-label='Rename']")
    page.fill("#chat-list input.rename", "my chat")
    page.press("#chat-list input.rename", "Enter")
    assert page.locator("#chat-list li.current .chat-open").inner_text() == "my chat"

    # the language switch
    page.click("#lang")
    assert page.locator("#send").inner_text() == "发送" and page.locator(".msg.user strong").first.inner_text() == "你"
    page.click("#lang")
    assert page.locator("#send").inner_text() == "Send"
    page.close()


def test_a_reply_token_opens_its_alternatives_and_its_attention(browser, chat_server):  # noqa: F811
    url, generator = chat_server
    page = opened(browser, url, temperature=0.9, seed=3, max_tokens=8)
    say(page, "what is inside", 1)
    page.click(".msg.assistant button[aria-label='Show the tokens']")
    tokens = page.locator(".msg.assistant .tok")
    assert tokens.count() == len(stored(page)[0]["messages"][1]["info"]["ids"])
    tokens.nth(2).click()
    page.wait_for_selector("#inspect:not([hidden])")
    page.wait_for_function("document.querySelectorAll('#attention-text .att').length > 0", timeout=30_000)
    probabilities = [float(p) for p in page.locator("#alternatives li").evaluate_all("l => l.map(i => i.dataset.p)")]
    assert len(probabilities) == 5 and sum(probabilities) <= 1 + 1e-6 and probabilities == sorted(probabilities)[::-1]
    clicked = stored(page)[0]["messages"][1]["info"]["tokens"][2]  # the third token's own step, as streamed
    assert probabilities == pytest.approx([math.exp(alt["logprob"]) for alt in clicked["top_logprobs"]], rel=1e-12)
    chosen = [i for i, alt in enumerate(clicked["top_logprobs"])  # the token itself, where it is in the top 5
              if alt["token"] == clicked["token"] and alt["logprob"] == clicked["logprob"]]
    marked = page.locator("#alternatives li").evaluate_all("l => l.map((i, k) => [k, i.classList.contains('chosen')])")
    assert [k for k, on in marked if on] == chosen  # one, or none
    # as many columns as the conversation's tokens up to this one: the prompt, then the reply's first three
    counted = httpx.post(f"{url}/tokenize", headers={"Authorization": f"Bearer {KEY}"},
                         json={"messages": [{"role": "user", "content": "what is inside"}]}).json()["count"]
    assert page.locator("#attention-text .att").count() == counted + 3
    cfg = generator.model.config
    assert page.locator("#head-summary td.share").count() == cfg.n_decoder_layers * cfg.n_heads
    page.locator("#head-summary td.share").nth(cfg.n_heads + 1).click()  # layer 2, head 2
    assert page.locator("#att-layer").input_value() == "1" and page.locator("#att-head").input_value() == "1"
    assert "All" in page.locator("#attention-note").inner_text()
    # a conversation longer than the cap: its last CAP tokens, and a note that says so
    say(page, "tell me more about what is inside and why " * 3, 2)
    page.click(".msg.assistant >> nth=1 >> button[aria-label='Show the tokens']")
    page.locator(".msg.assistant >> nth=1 >> .tok").first.click()
    page.wait_for_function(f"document.querySelectorAll('#attention-text .att').length === {CAP}", timeout=30_000)
    assert f"The last {CAP} of" in page.locator("#attention-note").inner_text()
    page.close()


def test_markup_in_a_reply_is_shown_as_text(browser, chat_server):  # noqa: F811
    url, _ = chat_server
    page = opened(browser, url)
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": UNSAFE}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    page.route("**/v1/chat/completions", lambda route: route.fulfill(status=200, body=body,
                                                                     content_type="text/event-stream"))
    say(page, "show me markup", 1)
    reply = page.locator(".msg.assistant .msg-body")
    assert "<script>window.pwned = 1</script>" in reply.inner_text() and "<img src=x" in reply.inner_text()
    assert reply.locator("script, img").count() == 0 and page.evaluate("window.pwned === undefined")
    assert reply.locator("strong").inner_text() == "bold" and reply.locator("p code").inner_text() == "code"
    assert reply.locator("em").inner_text() == "it" and reply.locator("ul li").all_inner_texts() == ["one", "two"]
    assert reply.locator("table th").all_inner_texts() == ["a", "b"] and reply.locator("td").count() == 2
    assert reply.locator("pre code").inner_text() == "print('<b>hi</b>')" and reply.locator("pre b").count() == 0
    assert reply.locator(".code button.copy").count() == 1
    assert reply.locator("a").count() == 1 and reply.locator("a").get_attribute("href") == "https://example.org"
    page.close()


def test_a_phone_width_window_and_the_keyboard_alone(browser, chat_server):  # noqa: F811
    url, _ = chat_server
    page = opened(browser, url, width=390, max_tokens=6)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert not page.locator("#adapter").is_visible()  # a server without --lora adapters: no adapter to choose
    page.focus("#message")
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")  # a new line, not a send
    page.keyboard.type("line two")
    assert page.locator("#message").input_value() == "line one\nline two"
    page.keyboard.press("Enter")
    settle(page, 1)
    assert page.locator(".msg.user .msg-body").inner_text() == "line one\nline two"
    page.close()


def test_a_drafted_reply_marks_the_tokens_its_draft_guessed(browser, chat_server, tmp_path):  # noqa: F811
    """A server with ``--draft`` (the model drafting for itself: every guess agreed to) streams the reply greedy
    decoding gives, each token with its log-probabilities, and the page marks the tokens the draft guessed and counts
    them; the plain server's reply marks none."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    plain_url, _ = chat_server
    checkpoint = chat_checkpoint(tmp_path / "ckpt", max_len=512)  # the plain server's weights
    generator = TextGenerator.from_checkpoint(checkpoint, draft=str(checkpoint))
    generator.decoding = generator.decoding.replace(min_new_tokens=10_000)
    limits = Limits(max_attention_tokens=CAP)
    replies = []
    with serving(create_app(generator, limits, name="tiny-chat", api_key=KEY), limits) as url:
        for at in (url, plain_url):
            page = opened(browser, at, temperature=0, max_tokens=24)
            say(page, "what is inside", 1)
            page.click(".msg.assistant button[aria-label='Show the tokens']")
            info = stored(page)[0]["messages"][1]["info"]
            replies.append((stored(page)[0]["messages"][1]["content"], info,
                            page.locator(".msg.assistant .tok.drafted").count(),
                            page.locator(".msg.assistant .stats").inner_text()))
            page.close()
    (drafted_text, info, marked, stats), (plain_text, plain_info, plain_marked, plain_stats) = replies
    assert drafted_text == plain_text and len(info["ids"]) == 24 == len(info["tokens"]) == len(info["drafted"])
    assert marked == sum(info["drafted"]) >= 12  # a pass of the draft's guesses, then the model's own token
    assert f"{marked} of them guessed by the draft" in stats
    assert [t["logprob"] for t in info["tokens"]] == pytest.approx([t["logprob"] for t in plain_info["tokens"]],
                                                                   abs=1e-4)
    assert plain_marked == 0 and plain_info["drafted"] == [] and "guessed" not in plain_stats


def test_the_calls_a_server_runs_through_mcp_show_in_the_reply(browser, tmp_path):  # noqa: F811
    """A server with MCP tools (``--mcp``: the faults server of tests/serve/mcp_faults.py) offers them in the
    settings; a reply that is made to call ``add`` shows the call and, unfolded, the tool's own result, before the
    answer; the call is kept with the conversation."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.mcp_tools import McpTools
    from aiayn.serve.server import create_app
    from serve.test_mcp import mcp_file

    from conftest import qwen_checkpoint

    tools = McpTools(mcp_file(tmp_path), tmp_path / "logs")
    generator = TextGenerator.from_checkpoint(qwen_checkpoint(tmp_path / "ckpt"))
    limits = Limits()
    try:
        with serving(create_app(generator, limits, name="tiny-chat", api_key=KEY, mcp=tools), limits) as url:
            page = opened(browser, url, temperature=0, max_tokens=40)
            assert page.locator("#tools option").all_inner_texts()[3:] == ["add", "fail", "hang", "huge"]
            page.select_option("#tools", "add")
            say(page, "Add 2 and 3.", 1)
            call = page.locator(".msg.assistant .tool-call")
            assert call.count() == 1 and call.locator("summary").inner_text().startswith("🔧 add {")
            given = json.loads(call.locator("summary").inner_text().split(" ", 2)[2])
            call.locator("summary").click()
            assert call.locator("pre").inner_text() == f"the sum is {given['a'] + given['b']}"
            kept = stored(page)[0]["messages"][1]["calls"]
            assert [c["name"] for c in kept] == ["add"]
            page.close()
    finally:
        tools.close()
