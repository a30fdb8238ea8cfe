"""docs/img/chat-page.png: the chat page of ``aiayn serve`` on a real checkpoint, one question answered and one reply
token opened (its alternatives and its attention), drawn by Debian's chromium through Playwright.

    python scripts/chat_screenshot.py --checkpoint runs/smollm2 [--output docs/img/chat-page.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SYSTEM = "You are a helpful assistant. Answer in two short sentences."
QUESTION = "What is the capital of France, and what river runs through it?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", default=str(ROOT / "docs" / "img" / "chat-page.png"))
    p.add_argument("--token", default=" Paris", help="the reply token to open (its first occurrence)")
    args = p.parse_args()

    from playwright.sync_api import sync_playwright

    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    from conftest import serving

    limits = Limits()
    app = create_app(TextGenerator.from_checkpoint(args.checkpoint), limits, name=Path(args.checkpoint).name)
    with serving(app, limits) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_function("document.querySelector('#model-name').textContent !== ''", timeout=60_000)
        page.click("#system-box summary")
        page.fill("#system", SYSTEM)
        page.fill("#max-tokens", "60")
        page.fill("#message", QUESTION)
        page.press("#message", "Enter")
        page.wait_for_function("document.querySelectorAll('.msg.assistant').length === 1 && "
                               "document.querySelector('#stop').hidden", timeout=300_000)
        page.click(".msg.assistant button[aria-label='Show the tokens']")
        tokens = page.locator(".msg.assistant .tok")
        shown = args.token.replace(" ", "·")
        pick = next((i for i in range(tokens.count()) if tokens.nth(i).inner_text() == shown), 0)
        tokens.nth(pick).click()
        page.wait_for_function("document.querySelectorAll('#attention-text .att').length > 0", timeout=120_000)
        page.screenshot(path=args.output, full_page=True)
        browser.close()
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
