"""Prompt caching at the size people use it: a long system prompt (a page of Multi30K captions, about
``--system-tokens`` tokens), then ``--questions`` short different questions, each a streamed
``/v1/chat/completions`` request one after another; the time to the first streamed token of the first request
(cold: nothing cached) and the median of the others (warm: the system prompt's blocks cached).

It starts ``aiayn serve`` once per configuration, at the server's default flags but for the one named: the
default prompt cache (sized for the model), ``--prefix-cache-bytes 0`` (none), and any ``--extra NAME=FLAGS``;
``--peer URL`` measures a running OpenAI-compatible server (llama.cpp's, on the same weights) in the same run.
Every configuration must answer each question with the same tokens (greedy): the cache changes nothing but time.

    python benchmarks/bench_prompt_cache.py --checkpoint runs/smollm2 [--questions 7] [--system-tokens 1760]
    python benchmarks/bench_prompt_cache.py --checkpoint runs/gemma3 --completions   (a base model: /v1/completions)
    python benchmarks/bench_prompt_cache.py --checkpoint runs/smollm2 --chat-turns 10   (aiayn chat's library)
    python benchmarks/bench_prompt_cache.py --checkpoint runs/smollm2 --join-tokens 4000 [--chunks 0 16] [--extra N=F]
    python benchmarks/bench_prompt_cache.py --checkpoint runs/smollm2 --lookup-tokens 1887 8000   (its bookkeeping)
    python benchmarks/bench_prompt_cache.py --checkpoint runs/demo --translations 50   (a translator's sources)

Prints JSON lines {"config", "metric", "value", "unit"}: per configuration ttft_cold_ms, ttft_warm_ms (median),
speedup (cold / warm), and the warm time of each configuration over the default's.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
import time
from pathlib import Path

import httpx
from common import emit, start_server

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
QUESTIONS = ["Which caption has a dog?", "How many people are on the beach?", "Is anyone riding a bike?",
             "What colour is the car?", "Who is cooking?", "Where do the children play?", "Is it raining?",
             "What is the man holding?", "Which one is at night?", "Who is smiling?"]


def system_prompt(tokens: int) -> str:
    """About ``tokens`` tokens of English: Multi30K validation captions, one a line (a caption is about 14)."""
    with gzip.open(MULTI30K / "val.en.gz", "rt", encoding="utf-8") as f:
        captions = f.read().splitlines()
    return "Answer questions about these picture captions:\n" + "\n".join(captions[:max(1, tokens // 14)])


def ask(client: httpx.Client, url: str, model: str, system: str, question: str,
        completions: bool = False) -> tuple[float, str]:
    """(seconds to the first streamed token, the whole answer) of one greedy streamed chat request; with
    ``completions``, the system prompt and the question as one text through /v1/completions (a base model)."""
    body = {"model": model, "stream": True, "max_tokens": 8, "temperature": 0}
    if completions:
        route, body["prompt"] = "completions", f"{system}\n\nQuestion: {question}\nAnswer:"
    else:
        route, body["messages"] = "chat/completions", [{"role": "system", "content": system},
                                                       {"role": "user", "content": question}]
    start, first, text = time.perf_counter(), None, ""
    with client.stream("POST", f"{url}/v1/{route}", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            delta = choice.get("text") if completions else choice["delta"].get("content")
            if delta and first is None:
                first = time.perf_counter() - start
            text += delta or ""
    return (first if first is not None else time.perf_counter() - start), text


def measure(url: str, model: str, system: str, questions: list[str],
            completions: bool = False) -> tuple[float, float, list[str]]:
    """(cold ms, warm median ms, the answers)."""
    with httpx.Client(timeout=600) as client:
        runs = [ask(client, url, model, system, q, completions) for q in questions]
    times = [t * 1000 for t, _ in runs]
    return times[0], statistics.median(times[1:]), [a for _, a in runs]


def chat_turns(checkpoint: str, turns: int, system: str) -> None:
    """``aiayn chat``'s library (``Chat``): the time to the first piece of each turn, with its prompt cache (turn
    n+1 reuses turn n's keys and values) and without; turn 1 and the last turn printed, replies compared."""
    from aiayn.decoding.prefix import PromptCache
    from aiayn.inference.chat import Chat
    from aiayn.inference.generator import TextGenerator

    replies = {}
    for name, cached in (("chat", True), ("chat-no-prompt-cache", False)):
        generator = TextGenerator.from_checkpoint(checkpoint)
        if not cached:
            generator.prompt_cache = PromptCache(generator.model, max_bytes=0)
        chat, times, replies[name] = Chat(generator, system), [], []
        for turn in range(turns):
            start, first = time.perf_counter(), []
            answer = chat.reply(QUESTIONS[turn % len(QUESTIONS)], lambda piece, f=first, s=start: f.append(
                f or time.perf_counter() - s), temperature=0, max_new_tokens=8)
            times.append(first[0] * 1000 if first else float("nan"))
            replies[name].append(answer)
        emit(name, "ttft_turn1_ms", times[0], "ms", 1)
        emit(name, f"ttft_turn{turns}_ms", times[-1], "ms", 1)
    emit("chat", "replies_equal", replies["chat"] == replies["chat-no-prompt-cache"], "bool")


async def _stream(client, url: str, body: dict, times: list[float] | None = None) -> list[float]:
    """The arrival time of each streamed token of one /v1/completions request (appended to ``times`` as they come)."""
    times = [] if times is None else times
    async with client.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                times.append(time.perf_counter())
    return times


async def _joining(url: str, streams: int, join_tokens: int, system: str, after_s: float, plain_s: float,
                   stream_tokens: int) -> tuple[list[float], float | None]:
    """``streams`` running generations; after ``after_s`` a ``join_tokens``-token prompt joins (0: none, they run
    ``plain_s`` more). The running streams' gaps between tokens until its first token (they stop then), and that
    time to first token."""
    import asyncio

    body = {"model": "bench", "max_tokens": stream_tokens, "temperature": 0, "ignore_eos": True}
    rows = [[] for _ in range(streams)]
    async with httpx.AsyncClient(timeout=600) as client:
        running = [asyncio.create_task(_stream(client, url, {**body, "prompt": f"Story {i}:"}, rows[i]))
                   for i in range(streams)]
        await asyncio.sleep(after_s)
        start, first = time.perf_counter(), None
        if join_tokens:
            long = (system * (1 + join_tokens // max(1, len(system) // 4)))[:join_tokens * 4]
            joined = await _stream(client, url, {**body, "prompt": long, "max_tokens": 2})
            first = joined[0] - start
        else:
            await asyncio.sleep(plain_s)
        if any(task.done() for task in running):
            raise SystemExit(f"a running stream ended before the join did: raise --stream-tokens ({stream_tokens})")
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    gaps = [b - a for times in rows for a, b in itertools.pairwise(times) if b >= start]  # those during the join
    return gaps, first


def joining(checkpoint: str, streams: int, join_tokens: int, chunks: list[int], system: str,
            after_s: float = 2.0, plain_s: float = 10.0, stream_tokens: int = 4000,
            extra: dict[str, list[str]] | None = None) -> None:
    """Chunked prefill: the p99 gap between tokens of running streams while a long prompt joins, at the default
    flags and per ``--prefill-chunk`` (0: whole), beside their p99 with no prompt joining over as long as the
    default's join took (``plain_s`` only if it does not join); the joining prompt's first token."""
    import asyncio

    from common import percentile

    configs = [("default", []), ("no-join", []),
               *((f"prefill-chunk-{c}", ["--prefill-chunk", str(c)]) for c in chunks), *(extra or {}).items()]
    p99 = {}
    for name, flags in configs:
        server = start_server(name, checkpoint, "--model-name", "bench", *flags, "--max-new-tokens",
                              str(stream_tokens))
        try:
            gaps, first = asyncio.run(_joining(server.url, streams, 0 if name == "no-join" else join_tokens, system,
                                               after_s, plain_s, stream_tokens))
        finally:
            server.stop()
        p99[name] = (percentile(gaps, 99) if len(gaps) > 1 else max(gaps)) * 1000
        emit(name, "p99_inter_token_ms", p99[name], "ms", 1)
        emit(name, "max_inter_token_ms", max(gaps) * 1000, "ms", 1)
        if first is not None:
            emit(name, "joining_ttft_ms", first * 1000, "ms", 1)
            if name == "default":
                plain_s = first  # the streams alone over as long as the default's join (their pace slows as they grow)
    for name in p99:
        if name != "no-join":
            emit(name, "p99_over_no_join", p99[name] / p99["no-join"], "x", 2)


def lookups(checkpoint: str, lengths: list[int], repeats: int = 20) -> None:
    """The prompt cache's own bookkeeping at the length of a model's context: per prompt length, the time to find a
    stored prompt's blocks (``PromptCache.lookup``) and to store it again (``store``: every block kept already),
    its keys and values computed once by ``PromptCache.add``."""
    import torch

    from aiayn.decoding.prefix import PromptCache
    from aiayn.inference.generator import TextGenerator

    model = TextGenerator.from_checkpoint(checkpoint).model
    torch.manual_seed(0)
    for n in lengths:
        prompt = torch.randint(5, model.config.vocab_size, (n,)).tolist()
        store = PromptCache(model, max_bytes=2**40)
        store.add(prompt)
        cache = model.new_cache(1, n, next(model.parameters()))
        for name, work in (("lookup", lambda s=store, p=prompt: s.lookup([*p, 0], len(p))),
                           ("store_again", lambda s=store, p=prompt, c=cache: s.store(p, c, 0, len(p)))):
            start = time.perf_counter()
            for _ in range(repeats):
                work()
            emit(f"{n} tokens", f"{name}_ms", (time.perf_counter() - start) / repeats * 1000, "ms", 2)


def translations(checkpoint: str, sentences: int) -> None:
    """A translator's prompt cache: ``sentences`` Multi30K German validation sentences sent to ``/translate`` one
    after another, then the same again; per configuration (the default cache, ``--prefix-cache-bytes 0``) the
    median time of each pass and whether every translation is the same."""
    with gzip.open(MULTI30K / "val.de.gz", "rt", encoding="utf-8") as f:
        texts = f.read().splitlines()[:sentences]
    answers = {}
    for name, flags in (("default", []), ("no-prompt-cache", ["--prefix-cache-bytes", "0"])):
        server = start_server(name, checkpoint, *flags)
        try:
            with httpx.Client(timeout=600) as client:
                for run in ("first", "again"):
                    times, answers[name, run] = [], []
                    for text in texts:
                        start = time.perf_counter()
                        response = client.post(f"{server.url}/translate", json={"text": text})
                        times.append((time.perf_counter() - start) * 1000)
                        answers[name, run].append(response.json()["translation"])
                    emit(name, f"translate_{run}_median_ms", statistics.median(times), "ms", 2)
        finally:
            server.stop()
    emit("all", "answers_equal", len({tuple(a) for a in answers.values()}) == 1, "bool")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--questions", type=int, default=7)
    parser.add_argument("--system-tokens", type=int, default=1760, dest="system_tokens")
    parser.add_argument("--extra", action="append", default=[], help="NAME=FLAGS: one more configuration")
    parser.add_argument("--peer", help="URL of a running OpenAI-compatible server on the same weights")
    parser.add_argument("--peer-model", default="peer", dest="peer_model")
    parser.add_argument("--chat-turns", type=int, default=0, dest="chat_turns",
                        help="instead: aiayn chat's library over this many turns, with its prompt cache and without")
    parser.add_argument("--join-tokens", type=int, default=0, dest="join_tokens",
                        help="instead: chunked prefill, a prompt of this many tokens joining --streams running ones")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--chunks", type=int, nargs="*", default=[0, 32, 16],
                        help="--prefill-chunk sizes measured beside the default flags'")
    parser.add_argument("--join-after", type=float, default=2.0, dest="join_after", help="seconds before it joins")
    parser.add_argument("--plain-seconds", type=float, default=10.0, dest="plain_seconds",
                        help="seconds the streams are timed with no prompt joining (when the default's prompt "
                             "does not join; else as long as it took)")
    parser.add_argument("--stream-tokens", type=int, default=4000, dest="stream_tokens",
                        help="the running streams' max_tokens: enough to run on past the joining prompt's first token")
    parser.add_argument("--completions", action="store_true",
                        help="the system prompt and each question as one text through /v1/completions (a base model "
                             "without a chat template)")
    parser.add_argument("--lookup-tokens", type=int, nargs="*", default=[], dest="lookup_tokens",
                        help="prompt lengths: time the prompt cache's lookup and store of a stored prompt of each")
    parser.add_argument("--translations", type=int, default=0,
                        help="a translator: this many sentences to /translate, then again (its source cache)")
    args = parser.parse_args()
    if args.translations:
        translations(args.checkpoint, args.translations)
        return
    if args.lookup_tokens:
        lookups(args.checkpoint, args.lookup_tokens)
        return
    system = system_prompt(args.system_tokens)
    extra = {name: flags.split() for name, _, flags in (e.partition("=") for e in args.extra)}
    if args.join_tokens:
        joining(args.checkpoint, args.streams, args.join_tokens, args.chunks, system, args.join_after,
                args.plain_seconds, args.stream_tokens, extra)
        return
    if args.chat_turns:
        chat_turns(args.checkpoint, args.chat_turns, system)
        return
    questions = [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(args.questions + 1)]
    configs = {"default": [], "no-prompt-cache": ["--prefix-cache-bytes", "0"],
               **extra}
    warm, answers = {}, {}
    for name, flags in configs.items():
        server = start_server(name, args.checkpoint, "--model-name", "bench", *flags)
        try:
            cold, warm[name], answers[name] = measure(server.url, "bench", system, questions, args.completions)
        finally:
            server.stop()
        emit(name, "ttft_cold_ms", cold, "ms", 1)
        emit(name, "ttft_warm_ms", warm[name], "ms", 1)
        emit(name, "speedup", cold / warm[name], "x", 2)
    if args.peer:
        cold, warm["peer"], _ = measure(args.peer, args.peer_model, system, questions, args.completions)
        emit("peer", "ttft_cold_ms", cold, "ms", 1)
        emit("peer", "ttft_warm_ms", warm["peer"], "ms", 1)
    for name in warm:
        emit(name, "warm_over_default", warm[name] / warm["default"], "x", 2)
    same = all(a == answers["default"] for a in answers.values())
    emit("all", "answers_equal", same, "bool")
    if not same:
        raise SystemExit("the configurations answered differently")


if __name__ == "__main__":
    main()
