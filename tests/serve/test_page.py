"""The web page in a real browser: Debian's chromium driven by Playwright against a live local server."""

import os
import shutil

import httpx
import pytest

from conftest import serving

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail("the browser test needs Debian's chromium: run `apt-get install -y chromium` "
                    "(make test does this when it can)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


def cells(page) -> int:
    return page.locator("#heatmap rect.cell").count()


def test_translate_and_explore_attention(browser, live_server):
    url, _app = live_server
    page = browser.new_page()
    page.goto(url)
    page.fill("#source", "a b c d e")
    page.click("#translate")
    page.wait_for_selector("#explorer:not([hidden])", timeout=30_000)
    expected = httpx.post(f"{url}/translate", json={"text": "a b c d e", "beam_size": 4}).json()["translation"]
    assert page.locator("#translation").inner_text() == expected != ""
    maps = httpx.post(f"{url}/attention", json={"source": "a b c d e", "target": expected}).json()
    n_src, n_tgt = len(maps["source_tokens"]), len(maps["target_tokens"])
    assert cells(page) == n_tgt * n_src  # cross-attention first: target rows x source columns
    assert page.locator("#heatmap text.row-label").count() == n_tgt
    assert page.locator("#heatmap text.col-label").count() == n_src
    page.select_option("#layer", "1")
    page.select_option("#head", "2")
    first = page.locator('#heatmap rect.cell[data-row="0"][data-col="0"]').get_attribute("data-weight")
    assert float(first) == pytest.approx(maps["attention"]["cross"][1][2][0][0], abs=1e-4)
    # inside one head: the highlighted row's weights are the heatmap's, the mask and the scores are there
    page.hover('#heatmap rect.cell[data-row="1"][data-col="0"]')
    page.wait_for_selector("#inside-body:not([hidden])", timeout=30_000)
    page.wait_for_function("document.querySelector('#inside-query').textContent.includes('(row 2)')")
    shown = [float(x) for x in page.locator("#inside-rows td[data-weight]").evaluate_all(
        "cells => cells.map(c => c.dataset.weight)")]
    assert shown == pytest.approx(maps["attention"]["cross"][1][2][1], abs=1e-4)
    assert page.locator("#inside-rows tr").count() == n_src
    assert page.locator("#inside-rows tr.active").get_attribute("data-key") == "0"
    page.select_option("#kind", "encoder")
    assert cells(page) == n_src * n_src
    page.select_option("#head", "mean")
    page.wait_for_selector("#inside-body", state="hidden")
    page.hover('#heatmap rect.cell[data-row="1"][data-col="0"]')
    assert page.locator("#cell-info").inner_text().startswith(f"{maps['source_tokens'][1]} → ")
    page.close()


def test_keyboard_only(browser, live_server):
    url, _app = live_server
    page = browser.new_page()
    page.goto(url)
    page.keyboard.press("Tab")  # the first stop is the language switch, the next the text box
    assert page.evaluate("document.activeElement.id") == "lang"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "source"
    page.keyboard.type("c d e f")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#explorer:not([hidden])", timeout=30_000)
    assert page.locator("#translation").inner_text() != ""
    page.focus("#heatmap")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    active = page.locator("#heatmap rect.cell.active")
    assert (active.get_attribute("data-row"), active.get_attribute("data-col")) == ("1", "1")
    page.focus("#head")  # keyboard only: choose head 1, back to the map, walk down a row
    page.keyboard.press("ArrowDown")
    page.focus("#heatmap")
    page.keyboard.press("ArrowDown")
    page.wait_for_function("document.querySelector('#inside-query').textContent.includes('(row 3)')", timeout=30_000)
    assert page.locator("#inside-rows tr.active").get_attribute("data-key") == "1"
    page.close()


def test_the_language_toggle_switches_labels_and_help(browser, live_server):
    url, _app = live_server
    page = browser.new_page()
    page.goto(url)
    assert page.locator("#translate-title").inner_text() == "Translate"
    page.focus("#lang")
    page.keyboard.press("Enter")
    assert page.locator("#translate-title").inner_text() == "翻译"
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert page.get_attribute("#source", "placeholder").startswith("输入")
    page.fill("#source", "a b c")
    page.click("#translate")
    page.wait_for_selector("#explorer:not([hidden])", timeout=30_000)
    assert page.locator("#layer option").first.inner_text() == "第 1 层"
    assert page.locator("#inside-query").inner_text().startswith("请选择单个注意力头")
    page.reload()  # the choice is remembered
    assert page.locator("#translate-title").inner_text() == "翻译"
    page.click("#lang")
    assert page.locator("#translate-title").inner_text() == "Translate"
    page.close()


@pytest.fixture(scope="module")
def cmlm_server(cmlm_run):
    """A live server for the tiny CMLM (Mask-Predict)."""
    from aiayn.inference.translator import Translator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    limits = Limits()
    with serving(create_app(Translator.from_checkpoint(cmlm_run), limits), limits) as url:
        yield url


def test_a_cmlm_page_shows_mask_predict_iteration_by_iteration(browser, cmlm_server):
    page = browser.new_page()
    page.goto(cmlm_server)
    page.wait_for_function("document.querySelector('#beam').options[0].value === '10'")
    page.select_option("#beam", "4")
    page.fill("#source", "a b c d e f")
    page.click("#translate")
    page.wait_for_selector("#refinement:not([hidden])", timeout=30_000)
    expected = httpx.post(f"{cmlm_server}/translate", json={"text": "a b c d e f", "iterations": 4}).json()
    found = httpx.post(f"{cmlm_server}/refinement", json={"source": "a b c d e f", "iterations": 4}).json()
    assert page.locator("#translation").inner_text() == expected["translation"] == found["translation"]
    rows = page.locator("#refinement-table tr")
    assert rows.count() == 4 and page.locator("#explorer").is_hidden()
    for i, step in enumerate(found["steps"]):
        shown = rows.nth(i).locator("td:not(:first-child)")
        assert shown.all_inner_texts() == step["tokens"]
        framed = [c == "predicted" for c in shown.evaluate_all("cells => cells.map(c => c.className)")]
        assert framed == step["predicted"]
    assert all(found["steps"][0]["predicted"]) and not all(found["steps"][-1]["predicted"])
    page.click("#lang")
    assert page.locator("#refinement-title").inner_text() == "Mask-Predict：逐轮迭代"
    page.click("#lang")
    page.close()


def test_a_ctc_page_shows_what_each_upsampled_position_emits(browser, ctc_run):
    from aiayn.inference.translator import Translator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    limits = Limits()
    with serving(create_app(Translator.from_checkpoint(ctc_run), limits), limits) as url:
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("document.querySelector('#beam').options[0].textContent === 'CTC, one pass'")
        page.fill("#source", "a b c d e f")
        page.click("#translate")
        page.wait_for_selector("#refinement:not([hidden])", timeout=30_000)
        found = httpx.post(f"{url}/refinement", json={"source": "a b c d e f"}).json()
        assert page.locator("#translation").inner_text() == found["translation"]
        rows = page.locator("#refinement-table tr")
        assert rows.count() == 2 and page.locator("#explorer").is_hidden()
        assert rows.nth(0).locator("td:not(:first-child)").all_inner_texts() == found["inputs"]
        shown = rows.nth(1).locator("td:not(:first-child)")
        assert shown.all_inner_texts() == found["steps"][0]["tokens"]
        framed = [c == "predicted" for c in shown.evaluate_all("cells => cells.map(c => c.className)")]
        assert framed == found["steps"][0]["predicted"] and len(framed) == 2 * len(found["source_tokens"])
        assert page.locator("#refinement-title").inner_text() == "CTC: what each position emits"
        page.close()


def _lm_server(lm_run, step_delay: float = 0.0):
    """A live server for the tiny language model; ``step_delay`` seconds added to each decoding step."""
    import time

    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    generator = TextGenerator.from_checkpoint(lm_run)
    if step_delay:
        step = generator.model.step

        def slow_step(tokens, state, last=False):
            time.sleep(step_delay)
            return step(tokens, state, last)
        generator.model.step = slow_step
    limits = Limits(max_new_tokens=64)
    return serving(create_app(generator, limits), limits)


@pytest.fixture(scope="module")
def lm_server(lm_run):
    with _lm_server(lm_run) as url:
        yield url


def test_language_model_page_streams_the_continuation(browser, lm_run):
    """The tiny model makes 20 tokens in a few milliseconds, which a loaded machine may send in one network
    read; 30 ms a step makes a stream that must arrive in several."""
    with _lm_server(lm_run, step_delay=0.03) as url:
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#lm:not([hidden])", timeout=30_000)
        assert page.locator("#mlm").is_hidden()
        page.fill("#prompt", "the cat ")
        page.fill("#max-new", "20")
        page.fill("#temperature", "0")
        page.evaluate("""window.updates = 0; new MutationObserver(() => window.updates++).observe(
            document.querySelector('#continuation'), {childList: true, characterData: true, subtree: true})""")
        page.focus("#prompt")
        page.keyboard.press("Control+Enter")  # keyboard only
        page.wait_for_function("document.querySelector('#status').textContent.includes('tokens')", timeout=30_000)
        expected = httpx.post(f"{url}/generate", json={"prompt": "the cat ", "max_new_tokens": 20,
                                                        "temperature": 0}).json()["text"]
        assert page.locator("#continuation").inner_text() == expected != ""
        assert "20 tokens" in page.locator("#status").inner_text()
        # streamed: the text arrived in several deliveries (one observer call per task that changed it; 20 steps of
        # 30 ms or more each give several, however many events share a network read)
        assert page.evaluate("window.updates") >= 2
        page.close()


def _greedy_continuation(page, url: str, prompt: str, new_tokens: int) -> None:
    """Continue ``prompt`` greedily on the language model's page, by mouse, until its attention map is shown."""
    page.goto(url)
    page.wait_for_selector("#lm:not([hidden])", timeout=30_000)
    page.fill("#prompt", prompt)
    page.fill("#max-new", str(new_tokens))
    page.fill("#temperature", "0")
    page.click("#generate")
    page.wait_for_selector("#explorer:not([hidden])", timeout=60_000)


def test_language_model_page_explores_causal_attention(browser, lm_server):
    page = browser.new_page()
    _greedy_continuation(page, lm_server, "the dog ", 12)
    text = "the dog " + page.locator("#continuation").inner_text()
    maps = httpx.post(f"{lm_server}/attention", json={"text": text}).json()
    n = len(maps["tokens"])
    assert cells(page) == n * n and page.locator("#heatmap text.row-label").count() == n
    page.select_option("#layer", "1")
    page.select_option("#head", "1")  # the second head
    weight = lambda r, c: float(page.locator(  # noqa: E731
        f'#heatmap rect.cell[data-row="{r}"][data-col="{c}"]').get_attribute("data-weight"))
    assert weight(n - 1, 3) == pytest.approx(maps["attention"]["decoder_self"][1][1][n - 1][3], abs=1e-4)
    assert weight(2, 5) == 0.0  # causal: a token never sees the ones after it
    page.focus("#heatmap")
    page.keyboard.press("ArrowDown")
    assert page.locator("#heatmap rect.cell.active").get_attribute("data-row") == "1"
    page.wait_for_function("document.querySelector('#inside-query').textContent.includes('(row 2)')", timeout=30_000)
    inside = httpx.post(f"{lm_server}/attention/head", json={"text": text, "layer": 1, "head": 1, "query": 1}).json()
    shown = page.locator("#inside-rows td[data-weight]").evaluate_all("cells => cells.map(c => c.dataset.weight)")
    assert [float(x) for x in shown] == pytest.approx(inside["weights"], abs=1e-4)
    assert inside["weights"] == maps["attention"]["decoder_self"][1][1][1]
    page.close()


@pytest.fixture(scope="module")
def long_lm_server(lm_run):
    """The language model with room for a 120-token continuation and its attention map."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    limits = Limits(max_new_tokens=128, max_attention_tokens=160)
    with serving(create_app(TextGenerator.from_checkpoint(lm_run), limits), limits) as url:
        yield url


def test_a_long_attention_map_fits_the_window_by_mouse_and_keyboard(browser, long_lm_server):
    """120 tokens at full cell size were ~3,900 px: the page scrolled sideways. Now the cells shrink, the labels
    thin out, the map scrolls inside its panel only, and the keyboard's cell is scrolled into view."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    _greedy_continuation(page, long_lm_server, "the cat ", 120)
    n = int(page.locator("#heatmap").get_attribute("aria-label").split()[2])  # "attention heatmap, N rows ..."
    assert n > 60 and cells(page) == n * n
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # the page never scrolls
    size = float(page.locator('#heatmap rect.cell[data-row="0"][data-col="0"]').get_attribute("width"))
    assert 10 <= size < 28  # shrunk
    labels = page.locator("#heatmap text.row-label").count()
    assert 0 < labels < n  # thinned: one every ceil(13 / size) tokens, none overlapping
    wrap = page.locator("#heatmap-wrap")
    page.focus("#heatmap")
    for _ in range(n - 1):
        page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    active = page.locator("#heatmap rect.cell.active")
    assert active.get_attribute("data-col") == str(n - 1) and active.get_attribute("data-row") == "1"
    box, panel = active.bounding_box(), wrap.bounding_box()
    assert panel["x"] <= box["x"] and box["x"] + box["width"] <= panel["x"] + panel["width"] + 1  # in view
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # the mouse reaches it there
    assert page.locator("#heatmap rect.cell.active").get_attribute("data-col") == str(n - 1)
    page.close()
