"""GET /metrics in Prometheus' text format (``prometheus_client``): requests by endpoint and status, tokens in
and out, time to first token and inter-token latency, the generation queue, running rows and the prefix cache.

Each app has its own registry (two servers in one process never share counts). The scheduler reports
a request when it finishes (its timestamps ride on the request); the rest is read when /metrics is scraped.
"""

from __future__ import annotations

from itertools import pairwise

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The instruments of one server."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("aiayn_requests", "HTTP requests answered, by route and status",
                                ["endpoint", "status"], registry=registry)
        self.prompt_tokens = Counter("aiayn_prompt_tokens", "prompt tokens of finished generations",
                                     registry=registry)
        self.generated_tokens = Counter("aiayn_generation_tokens", "tokens generated", registry=registry)
        self.ttft = Histogram("aiayn_time_to_first_token_seconds", "from a generation's submission to its first "
                              "token", buckets=LATENCY_BUCKETS, registry=registry)
        self.itl = Histogram("aiayn_inter_token_latency_seconds", "between two tokens of one generation",
                             buckets=LATENCY_BUCKETS, registry=registry)

    def watch(self, batcher) -> None:
        """Gauges read from the scheduler when scraped."""
        gauges = {"aiayn_queue_length": ("requests waiting to join the batch", lambda: batcher.waiting.qsize()),
                  "aiayn_running_rows": ("rows in the running batch", lambda: batcher.engine.rows)}
        if batcher.prefix_cache is not None:
            cache = batcher.prefix_cache
            gauges.update({
                "aiayn_prefix_cache_hits": ("prompts that reused cached blocks", lambda: cache.hits),
                "aiayn_prefix_cache_misses": ("prompts that found no cached block", lambda: cache.misses),
                "aiayn_prefix_cache_hit_tokens": ("prompt tokens read from the cache", lambda: cache.hit_tokens),
                "aiayn_prefix_cache_bytes": ("bytes of keys/values held", lambda: cache.bytes)})
        if batcher.draft is not None:
            counts = batcher.speculative
            gauges.update({
                "aiayn_draft_tokens": ("tokens a draft proposed (speculative decoding)", lambda: counts.proposed),
                "aiayn_draft_accepted_tokens": ("drafted tokens the model accepted", lambda: counts.accepted)})
        model = getattr(batcher, "model", None)
        if model is not None and model.config.arch == "decoder-only":
            gauges["aiayn_compiled_step"] = ("1 while the compiled decoding step is in use, else 0",
                                             lambda: float(model.runtime.static is not None))
        for name, (doc, read) in gauges.items():
            Gauge(name, doc, registry=self.registry).set_function(read)

    def finished(self, request) -> None:
        """Record a finished request (a generation or translation: its prompt or source, its tokens, and
        when each token came)."""
        self.prompt_tokens.inc(len(request.prompt))
        self.generated_tokens.inc(len(request.generated))
        if request.token_times:
            self.ttft.observe(request.token_times[0] - request.submitted_at)
        for earlier, later in pairwise(request.token_times):
            self.itl.observe(later - earlier)


class CountRequests:
    """ASGI middleware: count each answered request by its route's path (``other`` for paths the app does not
    have, so that clients cannot grow the label set) and its status; refused ones (401, 413) too."""

    def __init__(self, app, metrics: Metrics, routes: FastAPI) -> None:
        self.app, self.metrics, self.routes, self.paths = app, metrics, routes, None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counted(message) -> None:
            if message["type"] == "http.response.start":
                if self.paths is None:
                    self.paths = {getattr(route, "path", None) for route in self.routes.routes}
                path = scope["path"] if scope["path"] in self.paths else "other"
                self.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


def add_metrics(app: FastAPI, batcher=None) -> Metrics:
    """GET /metrics on ``app`` (and the request counts); with the ``batcher`` (scheduler), its tokens, latencies,
    queue and prefix cache."""
    metrics = Metrics()
    app.add_middleware(CountRequests, metrics=metrics, routes=app)
    if batcher is not None:
        metrics.watch(batcher)
        batcher.on_finish = metrics.finished

    @app.get("/metrics", include_in_schema=False)
    async def scrape() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return metrics
