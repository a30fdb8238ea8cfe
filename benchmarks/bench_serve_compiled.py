"""The compiled decoding step on a live `aiayn serve`, through the openai client: 1, 2 and 4 chats streamed at once.

Starts ``aiayn serve --checkpoint RUN --int4`` (or ``--precision-flag``) twice, ``--compile off`` and ``--compile
on`` (the server compiles a graph for one row and one for a running batch, or loads the ones kept in aiayn's cache
folder), and for each number of concurrent chats streams ``--tokens`` tokens a chat (temperature 0, each chat its
own question) and prints JSON lines: the server's ready time, output tokens/s over all chats, the median gap
between a chat's chunks, whether each chat's text equals the eager server's, and the ratios compiled / eager.

    python benchmarks/bench_serve_compiled.py --checkpoint runs/smollm2 [--streams 1 2 4] [--tokens 64]
    python benchmarks/bench_serve_compiled.py --checkpoint runs/smollm2 --precision-flag ""   # float32
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from common import emit, start_server

QUESTIONS = ["What is the capital of France?", "Name three colours of the rainbow.", "Why is the sky blue?",
             "What do bees make?", "How many legs has a spider?", "What is water made of?"]


def client(url: str):
    """An openai client of the server at ``url`` and the name of the model it serves."""
    from openai import OpenAI

    served = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    return served, served.models.list().data[0].id


def chat(served, question: str, tokens: int) -> tuple[str, list[float]]:
    """One streamed chat through the openai client: its text and the times it was sent, then its chunks came."""
    openai_client, model = served
    stream = openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                            temperature=0, max_tokens=tokens, stream=True)
    text, times = [], [time.perf_counter()]
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
            times.append(time.perf_counter())
    return "".join(text), times


def measure(served, streams: int, tokens: int) -> tuple[float, dict[str, float], list[str]]:
    """``streams`` chats at once: output chunks a second over all; the median and longest gap within a chat and
    the longest time to a first chunk (ms); the texts."""
    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        done = list(pool.map(lambda q: chat(served, q, tokens), QUESTIONS[:streams]))
    chunks = sum(len(times) - 1 for _, times in done)
    gaps = [b - a for _, times in done for a, b in itertools.pairwise(times[1:])]
    ms = {"median_gap": statistics.median(gaps) * 1000, "longest_gap": max(gaps) * 1000,
          "longest_first_chunk": max(times[1] - times[0] for _, times in done) * 1000}
    return chunks / (time.perf_counter() - start), ms, [text for text, _ in done]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--precision-flag", default="--int4", dest="precision")
    args = parser.parse_args()
    rates, texts = {}, {}
    for mode in ("off", "on"):
        start = time.perf_counter()
        flags = [args.precision] if args.precision else []  # "": float32
        server = start_server(f"compile-{mode}", args.checkpoint, *flags, "--compile", mode, seconds=600)
        try:
            served = client(server.url)
            chat(served, QUESTIONS[0], 2)  # waits for the compile (the decoding thread's first chore)
            emit(f"compile-{mode}", "ready", time.perf_counter() - start, "s (started, compiled, first chat)", 1)
            for streams in args.streams:
                rate, ms, said = measure(served, streams, args.tokens)
                rates[mode, streams], texts[mode, streams] = rate, said
                emit(f"compile-{mode}/streams{streams}", "output", rate, "tokens/s (chunks, all chats)", 1)
                for metric, value in ms.items():
                    emit(f"compile-{mode}/streams{streams}", metric, value, "ms", 1)
        finally:
            server.stop()
    for streams in args.streams:
        emit(f"streams{streams}", "compiled_vs_eager", rates["on", streams] / rates["off", streams], "x")
        emit(f"streams{streams}", "same_texts", texts["on", streams] == texts["off", streams], "bool")


if __name__ == "__main__":
    main()
