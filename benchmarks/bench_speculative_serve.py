"""``aiayn serve --draft``: speculative decoding inside continuous batching, through the official ``openai`` client.

The same checkpoint is served once per way to draft (``none``, then each of ``--drafts``); at each concurrency
(1, 4, 8 streams: a client per stream, each asking the chat questions in turn, streamed, greedy) the total new
tokens/s over all streams is measured, and every answer is checked against the plain server's (the output
unchanged). Prints JSON lines {"config", "metric", "value", "unit"}: tokens/s, the speedup over ``none`` at the
same concurrency, the server's drafted and accepted tokens, and whether every text was the plain one.

    python benchmarks/bench_speculative_serve.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                                 [--drafts ngram int4] [--streams 1 4 8] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from bench_speculative_lm import CHAT
from common import emit, start_server


def one_stream(url: str, questions: list[str], max_tokens: int) -> tuple[list[str], int]:
    """A client asking ``questions`` one after another, each answer streamed: (texts, new tokens)."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    texts, made = [], 0
    for question in questions:
        parts = []
        for chunk in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}], max_tokens=max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                made += chunk.usage.completion_tokens
        texts.append("".join(parts))
    return texts, made


def load(url: str, streams: int, max_tokens: int, questions: int) -> tuple[dict, float, int]:
    """``streams`` clients at once, client i asking the chat questions from the i-th on: (texts by
    (client, question), seconds, new tokens)."""
    asks = [[CHAT[(i + j) % len(CHAT)] for j in range(questions)] for i in range(streams)]
    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        done = list(pool.map(lambda a: one_stream(url, a, max_tokens), asks))
    seconds = time.perf_counter() - start
    texts = {(i, q): t for i, (got, _) in enumerate(done) for q, t in zip(asks[i], got, strict=True)}
    return texts, seconds, sum(made for _, made in done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--drafts", nargs="+", default=["ngram", "int4"])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--max-tokens", type=int, default=128, dest="max_tokens")
    parser.add_argument("--questions", type=int, default=3, help="questions each stream asks in turn")
    parser.add_argument("--flags", nargs="*", default=[], help="more `aiayn serve` flags for every server")
    args = parser.parse_args()
    plain: dict = {}
    speeds: dict = {}
    for draft in ["none", *args.drafts]:
        flags = [*args.flags, "--model-name", "m", "--max-new-tokens", str(args.max_tokens)]
        flags += [] if draft == "none" else ["--draft", draft]
        server = start_server(draft, args.checkpoint, *flags, seconds=600)
        try:
            load(server.url, 1, 8, 1)  # warm: the first pass of each shape
            for streams in args.streams:
                texts, seconds, made = load(server.url, streams, args.max_tokens, args.questions)
                config = {"draft": draft, "streams": streams, "max_tokens": args.max_tokens}
                speeds[draft, streams] = made / seconds
                emit(config, "tokens_per_s", made / seconds, "tokens/s")
                if draft == "none":
                    plain[streams] = texts
                else:
                    emit(config, "speedup", speeds[draft, streams] / speeds["none", streams], "x")
                    emit(config, "same_text", texts == plain[streams], "bool")
            health = httpx.get(f"{server.url}/health").json()
            if draft != "none":
                emit({"draft": draft}, "accepted_share", health["accepted_tokens"] / max(1, health["drafted_tokens"]),
                     "ratio")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
