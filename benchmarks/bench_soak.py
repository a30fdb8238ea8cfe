"""A soak under load: a language-model server (OpenAI routes, an API key) and a translation server, each an ``aiayn
serve`` process of its own, under a steady Poisson mix of requests for ``--minutes``: streamed and whole completions,
streams the client drops after the first token, whole translations the client gives up on, translations over
--max-chars and prompts over the context, a wrong API key. Every request is judged by what it must get (200 with a
whole answer, or its one refusal: 401, 400 or 413) and counted as ``ok``, ``refused``, ``cancelled``, ``5xx`` or
``lost`` (anything else: a transport error, an answer cut short, an unexpected status). Each server's RSS, open file
descriptors and threads are sampled every ``--every`` seconds, and counted at rest (no load, 12 s after it:
keep-alive closed, idle worker threads reaped) before the soak and after it. Then, under the same load, a few streams
are opened on the language-model server, SIGTERM is sent while they run: they must end whole, new requests get 503 or
a closed socket, the process exits 0 and nothing listens on its port afterwards.

Prints JSON lines {"config", "metric", "value", "unit"}: per minute each server's rss/fds/threads; then the
counts, p99 latency of whole requests in the first ``w`` minutes and the last (w = min(3, minutes / 4))
and their ratio, the largest RSS after minute m over RSS at minute m (m = min(3, minutes / 2)), fds and
threads at rest before and after, and the SIGTERM figures. ``soak()`` returns the same as a dict
(tests/test_bench_soak.py).

    python benchmarks/bench_soak.py --lm LM_CHECKPOINT --translator MT_CHECKPOINT [--minutes 30] [--rate 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import socket
import statistics
import time
from dataclasses import dataclass, field

import httpx
from common import Server, emit, percentile, start_server

KEY = "soak-key"
SENTENCES = ["Ein Mann fährt mit dem Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
             "1234", "forty two", "Kinder spielen am Strand."]
PROMPTS = ["Once upon a time", "The capital of France is", "the cat sat on the", "Write a haiku about rain:"]
MAX_CHARS = 400  # the servers' --max-chars: an over-limit prompt is one character more


@dataclass
class Outcome:
    kind: str
    at: float  # seconds since the soak's start when sent
    seconds: float
    result: str  # one of RESULTS
    detail: str = ""


RESULTS = ("ok", "refused", "busy", "cancelled", "5xx", "lost")


def judge(response: httpx.Response, want: int) -> str:
    if response.status_code == 503:
        return "draining"  # a clean refusal after SIGTERM, a server error before it (Soak.one)
    if response.status_code == 429:
        return "busy"  # a clean refusal: the server's queue is full (counted apart: the load is too high)
    if response.status_code >= 500:
        return f"5xx:{response.status_code}"
    if response.status_code != want:
        return f"lost:status {response.status_code}, expected {want}"
    return "ok" if want == 200 else "refused"


AUTH = {"Authorization": f"Bearer {KEY}"}


async def lm_whole(client: httpx.AsyncClient, url: str) -> str:
    body = {"model": "soak", "prompt": random.choice(PROMPTS), "max_tokens": 16, "temperature": 0}
    response = await client.post(f"{url}/v1/completions", json=body, headers=AUTH)
    verdict = judge(response, 200)
    whole = verdict != "ok" or response.json()["choices"][0]["finish_reason"] in ("stop", "length")
    return verdict if whole else "lost"


async def lm_stream(client: httpx.AsyncClient, url: str, tokens: int = 16, opened: asyncio.Event | None = None) -> str:
    """A streamed chat completion read to its end: ok only with a finish reason and [DONE]; a stream cut after
    its 200 is lost. ``opened`` is set at its first line (or when it ends without one)."""
    body = {"model": "soak", "messages": [{"role": "user", "content": random.choice(PROMPTS)}],
            "max_tokens": tokens, "temperature": 0, "stream": True}
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=AUTH) as response:
            if response.status_code != 200:
                return judge(response, 200)
            return await _read_stream(response, opened)
    finally:
        if opened is not None:
            opened.set()


async def _read_stream(response: httpx.Response, opened: asyncio.Event | None) -> str:
    finish, done, lines = None, False, 0
    try:
        async for line in response.aiter_lines():
            lines += 1
            if opened is not None:
                opened.set()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: {") and (choices := json.loads(line[6:])["choices"]):
                finish = choices[0].get("finish_reason") or finish
    except httpx.HTTPError as err:
        return f"lost:stream cut after {lines} lines ({type(err).__name__})"
    return "ok" if done and finish else f"lost:stream ended without {'[DONE]' if finish else 'a finish reason'}"


async def lm_cancel(client: httpx.AsyncClient, url: str) -> str:
    """A stream the client closes after its first chunk."""
    body = {"model": "soak", "prompt": random.choice(PROMPTS), "max_tokens": 200, "temperature": 0, "stream": True}
    async with client.stream("POST", f"{url}/v1/completions", json=body, headers=AUTH) as response:
        if response.status_code != 200:
            return judge(response, 200)
        try:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    return "cancelled"
        except httpx.HTTPError as err:
            return f"lost:stream cut before its first chunk ({type(err).__name__})"
    return "lost:stream ended before its first chunk"


async def lm_over(client: httpx.AsyncClient, url: str) -> str:
    """A prompt over the model's context (a language model's limit is in tokens): 400 context_length_exceeded."""
    body = {"model": "soak", "prompt": [1] * 20_000, "max_tokens": 4}
    return judge(await client.post(f"{url}/v1/completions", json=body, headers=AUTH), 400)


async def lm_bad_key(client: httpx.AsyncClient, url: str) -> str:
    body = {"model": "soak", "prompt": "hello", "max_tokens": 4}
    return judge(await client.post(f"{url}/v1/completions", json=body, headers={"Authorization": "Bearer no"}), 401)


async def mt_whole(client: httpx.AsyncClient, url: str) -> str:
    response = await client.post(f"{url}/translate", json={"text": random.choice(SENTENCES)})
    verdict = judge(response, 200)
    return "lost" if verdict == "ok" and not isinstance(response.json().get("translation"), str) else verdict


async def mt_batch(client: httpx.AsyncClient, url: str) -> str:
    texts = random.sample(SENTENCES, 3)
    response = await client.post(f"{url}/translate", json={"texts": texts})
    verdict = judge(response, 200)
    return "lost" if verdict == "ok" and len(response.json().get("translations", [])) != 3 else verdict


async def mt_give_up(client: httpx.AsyncClient, url: str) -> str:
    """A whole translation of eight texts the client stops waiting for after 20 ms."""
    try:
        response = await client.post(f"{url}/translate", json={"texts": SENTENCES + SENTENCES[:2]}, timeout=0.02)
    except httpx.TimeoutException:
        return "cancelled"
    return judge(response, 200)


async def mt_over(client: httpx.AsyncClient, url: str) -> str:
    return judge(await client.post(f"{url}/translate", json={"text": "a" * (MAX_CHARS + 1)}), 413)


# (kind, server, weight): whole requests weigh most; they are the ones whose latency is tracked
MIX = [(lm_whole, "lm", 4), (lm_stream, "lm", 3), (lm_cancel, "lm", 1), (lm_over, "lm", 1), (lm_bad_key, "lm", 1),
       (mt_whole, "mt", 4), (mt_batch, "mt", 2), (mt_give_up, "mt", 1), (mt_over, "mt", 1)]
WHOLE = ("lm_whole", "mt_whole")




@dataclass
class Soak:
    """The servers, the clock, and what every request got."""
    servers: dict[str, Server]
    rng: random.Random
    t0: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)
    samples: list[tuple[float, str, dict]] = field(default_factory=list)
    terminated: dict[str, float] = field(default_factory=dict)  # server -> when SIGTERM was sent
    rest: float = 12.0  # seconds after the load before the servers are counted at rest (past keep-alive's 5 s)
    drain_load: float = 20.0  # seconds of load around the SIGTERM

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def one(self, client: httpx.AsyncClient, kind, server: str) -> None:
        sent, detail = self.now(), ""
        try:
            result = await kind(client, self.servers[server].url)
        except (httpx.ConnectError, httpx.RemoteProtocolError) as err:  # refused or closed before any answer
            result, detail = ("refused" if server in self.terminated else "lost"), type(err).__name__
        except httpx.HTTPError as err:
            result, detail = "lost", type(err).__name__
        if result == "draining":
            result, detail = ("refused", "") if server in self.terminated else ("5xx", "503 before SIGTERM")
        result, _, more = result.partition(":")  # "lost:status 422, expected 200"
        self.outcomes.append(Outcome(kind.__name__, sent, self.now() - sent, result, detail or more))

    async def drive(self, client: httpx.AsyncClient, seconds: float, rate: float) -> None:
        """Poisson arrivals at ``rate`` a second for ``seconds``, each a kind drawn from MIX; waits for all."""
        end, tasks = self.now() + seconds, set()
        while (wait := self.rng.expovariate(rate)) < end - self.now():
            await asyncio.sleep(wait)
            kind, server, _ = self.rng.choices(MIX, weights=[w for *_, w in MIX])[0]
            tasks.add(asyncio.create_task(self.one(client, kind, server)))
        await asyncio.gather(*tasks)

    async def monitor(self, every: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for name, server in self.servers.items():
                if name not in self.terminated and server.proc.poll() is None:
                    with contextlib.suppress(OSError):  # it may end between the two checks
                        self.samples.append((self.now(), name, server.sample()))
            await asyncio.sleep(every)

    async def at_rest(self) -> dict[str, dict]:
        """Each live server's figures ``rest`` seconds after the load stopped, and its /health counts."""
        await asyncio.sleep(self.rest)
        rest = {}
        for name, server in self.servers.items():
            health = httpx.get(f"{server.url}/health", timeout=10).json()
            rest[name] = {**server.sample(), "open_requests": health.get("open_requests", 0)}
        return rest

    async def sigterm(self, client: httpx.AsyncClient, rate: float) -> dict:
        """Under load, three 64-token streams opened on the language-model server, then SIGTERM."""
        load = asyncio.create_task(self.drive(client, self.drain_load, rate))
        await asyncio.sleep(3)
        opened = [asyncio.Event() for _ in range(3)]
        url = self.servers["lm"].url
        streams = [asyncio.create_task(lm_stream(client, url, 64, event)) for event in opened]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 120)
        proc = self.servers["lm"].proc
        proc.send_signal(signal.SIGTERM)
        self.terminated["lm"] = self.now()
        ends = await asyncio.gather(*streams, return_exceptions=True)
        code = await asyncio.to_thread(proc.wait, 90)
        await load
        with socket.socket() as sock:
            listening = sock.connect_ex(("127.0.0.1", self.servers["lm"].port)) == 0
        return {"in_flight": len(ends), "in_flight_whole": sum(end == "ok" for end in ends), "exit_code": code,
                "listening_after": int(listening)}


def summarize(run: Soak, seconds: float, rest_before: dict, rest_after: dict, term: dict) -> dict:
    """The figures of a soak whose main phase ran ``seconds`` (warm-up before 0, SIGTERM phase after)."""
    window = min(3.0, seconds / 60 / 4) * 60  # the first and the last minutes whose latencies are compared
    settle = min(3.0, seconds / 60 / 2) * 60  # memory is compared from here on (a short run warms up a while)
    figures = {"requests": len(run.outcomes), **term}
    for result in RESULTS:
        figures[result] = sum(o.result == result for o in run.outcomes)
    bad = [o for o in run.outcomes if o.result in ("lost", "5xx")]
    figures["lost_examples"] = [f"{o.kind} at {o.at:.1f}s: {o.detail}" for o in bad][:5]
    figures["lost_by_minute"] = {str(m): sum(int(o.at // 60) == m for o in bad) for m in sorted({int(o.at // 60)
                                                                                             for o in bad})}
    figures["kinds_exercised"] = sorted({o.kind for o in run.outcomes})
    for kind in WHOLE:
        early = [o.seconds for o in run.outcomes if o.kind == kind and o.result == "ok" and 0 <= o.at < window]
        late = [o.seconds for o in run.outcomes if o.kind == kind and o.result == "ok"
                and seconds - window <= o.at < seconds]
        figures[f"{kind}_p99_early_ms"], figures[f"{kind}_p99_late_ms"] = (percentile(early, 99) * 1000,
                                                                             percentile(late, 99) * 1000)
        figures[f"{kind}_p99_ratio"] = figures[f"{kind}_p99_late_ms"] / figures[f"{kind}_p99_early_ms"]
        for q in (50, 90):  # steadier than the p99 of a few dozen requests
            early_q, late_q = percentile(early, q), percentile(late, q)
            figures[f"{kind}_p{q}_early_ms"], figures[f"{kind}_p{q}_late_ms"] = early_q * 1000, late_q * 1000
            figures[f"{kind}_p{q}_ratio"] = late_q / early_q
        figures[f"{kind}_count_early"], figures[f"{kind}_count_late"] = len(early), len(late)
        whole = [o for o in run.outcomes if o.kind == kind and o.result == "ok" and 0 <= o.at < seconds]
        figures[f"{kind}_by_minute_ms"] = {  # each minute's p50 and largest, to tell a trend from an outlier
            str(m): [round(statistics.median(got) * 1000), round(max(got) * 1000)]
            for m in range(int(seconds // 60) + 1) if (got := [o.seconds for o in whole if int(o.at // 60) == m])}
    for name in run.servers:
        main = [(t, s) for t, n, s in run.samples if n == name and 0 <= t < seconds]
        settled = min(main, key=lambda ts: abs(ts[0] - settle))[1]
        figures[f"{name}_rss_at_settle_mb"] = settled["rss"]
        figures[f"{name}_rss_growth"] = max(s["rss"] for t, s in main if t >= settle) / settled["rss"]
        after = [s for t, s in main if t >= window]
        for what in ("fds", "threads"):
            figures[f"{name}_{what}_rest_before"] = rest_before[name][what]
            figures[f"{name}_{what}_rest_after"] = rest_after[name][what]
            figures[f"{name}_{what}_max_early"] = max(s[what] for t, s in main if t < window)
            figures[f"{name}_{what}_max_late"] = max(s[what] for s in after)
        figures[f"{name}_open_requests_after"] = rest_after[name]["open_requests"]
        figures[f"{name}_per_minute"] = [{"minute": m, **min(main, key=lambda ts: abs(ts[0] - 60 * m))[1]}
                                         for m in range(int(seconds // 60) + 1)]
    return figures


async def _soak(servers: dict[str, Server], minutes: float, rate: float, every: float, warmup: float,
                seed: int, rest: float, drain_load: float) -> dict:
    run = Soak(servers, random.Random(seed), rest=rest, drain_load=drain_load)
    random.seed(seed)
    # idle connections dropped well before the server's 5 s keep-alive closes them (a request on a connection the
    # server is closing at that moment fails without an answer: the client's race, not the server's fault), with
    # room for this event loop to run late on a loaded machine
    limits = httpx.Limits(max_connections=48, max_keepalive_connections=16, keepalive_expiry=1.0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        run.t0 = time.monotonic() + warmup  # the warm-up's requests are at negative times
        await run.drive(client, warmup, rate)
        rest_before = await run.at_rest()
        run.t0, stop = time.monotonic(), asyncio.Event()
        watcher = asyncio.create_task(run.monitor(every, stop))
        await run.drive(client, minutes * 60, rate)
        seconds = run.now()
        rest_after = await run.at_rest()
        term = await run.sigterm(client, rate)
        stop.set()
        await watcher
    return summarize(run, seconds, rest_before, rest_after, term)


def soak(lm: str, translator: str, minutes: float = 30, rate: float = 3.0, every: float = 10.0,
         warmup: float = 30.0, seed: int = 0, log_dir: str | None = None, rest: float = 12.0,
         drain_load: float = 20.0) -> dict:
    """Start both servers, soak them, stop them (the translator by SIGTERM at the end, exit code checked);
    the figures (see the module's docstring)."""
    servers: dict[str, Server] = {}
    try:
        servers["lm"] = start_server("lm", lm, "--max-chars", str(MAX_CHARS), "--api-key", KEY, "--model-name", "soak",
                                     log_dir=log_dir)
        servers["mt"] = start_server("mt", translator, "--max-chars", str(MAX_CHARS), log_dir=log_dir)
        figures = asyncio.run(_soak(servers, minutes, rate, every, warmup, seed, rest, drain_load))
        servers["mt"].proc.send_signal(signal.SIGTERM)
        figures["translator_exit_code"] = servers["mt"].proc.wait(timeout=90)
    finally:
        for server in servers.values():
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
            server.log.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", required=True, help="a language model's checkpoint (the OpenAI routes)")
    parser.add_argument("--translator", required=True, help="a translation model's checkpoint")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=3.0, help="requests a second, both servers together")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between two samples of each server")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of load before the clock starts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", dest="log_dir", help="keep each server's stderr there (lm.log, mt.log)")
    args = parser.parse_args()
    figures = soak(args.lm, args.translator, args.minutes, args.rate, args.every, args.warmup, args.seed,
                   args.log_dir)
    config = f"soak/{args.minutes:g}min/rate{args.rate:g}"
    for name in ("lm", "mt"):
        for sample in figures.pop(f"{name}_per_minute"):
            for what, unit in (("rss", "MB"), ("fds", "count"), ("threads", "count")):
                emit(f"{config}/{name}/minute{sample['minute']}", what, sample[what], unit)
    for metric, value in figures.items():
        if isinstance(value, (int, float)):
            unit = "ms" if metric.endswith("_ms") else "MB" if metric.endswith("_mb") else (
                "ratio" if metric.endswith(("_ratio", "_growth")) else "count")
            emit(config, metric, value, unit)
        else:
            emit(config, metric, value, "text")


if __name__ == "__main__":
    main()
