"""The server's one admission check: whether the scheduler takes a request's jobs, and the decoding each runs with
(resolved against the model, its length set within the server's limits), or the :class:`Refusal` that each protocol
answers with its own status code (``serve/http.py::native_refusal``, ``serve/openai_schema.py::openai_refusal``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiayn.decoding.config import PARALLEL, DecodingConfig
from aiayn.model.transformer import TransformerModel
from aiayn.serve.jobs import DecodeJob, Refusal
from aiayn.serve.limits import Limits


def check(jobs: Sequence[DecodeJob], model: TransformerModel, limits: Limits, capacity: int, open_requests: int,
          start_width: Callable[[DecodeJob], int]) -> Refusal | None:
    """Jobs that come together (one request's): each job's decoding (:func:`decoding_for`, set on the job), the
    ``capacity`` cache columns its start (``start_width``) and limit need, and, for a language model, no more than
    ``limits.max_streams`` requests open (``busy``). None: all may be submitted."""
    lm = model.config.arch == "decoder-only"
    for job in jobs:
        decoding = decoding_for(job.decoding, model, limits)
        if isinstance(decoding, Refusal):
            return decoding
        job.decoding = decoding
        if lm and len(job.inputs) >= capacity:
            return Refusal("too_long", "prompt", f"prompt: {len(job.inputs)} tokens; the server's context is "
                                                 f"{capacity} tokens of prompt and continuation (aiayn serve "
                                                 "--max-model-len, up to the model's own)")
        if start_width(job) + decoding.max_new_tokens > capacity:
            return Refusal("too_long", "max_new_tokens", f"prompt and max_new_tokens: {len(job.inputs)} + "
                                                         f"{decoding.max_new_tokens} tokens exceed the model's "
                                                         f"{capacity}")
    if lm and open_requests + len(jobs) > limits.max_streams:
        return Refusal("busy", "n", f"busy: {open_requests} generations running or waiting (the server's limit is "
                                    f"{limits.max_streams}); try again shortly")
    return None


def decoding_for(decoding: DecodingConfig, model: TransformerModel, limits: Limits) -> DecodingConfig | Refusal:
    """A request's decoding resolved against the model (:meth:`DecodingConfig.resolve`: a strategy the model cannot
    run is ``invalid``) with its length limit set (unset: the default, cut to the server's limit), or the refusal:
    one output per job, a beam or a length over the server's limits (``too_long``)."""
    given = decoding.max_new_tokens is not None
    try:
        cfg = decoding.resolve(model.config)
    except ValueError as err:
        return Refusal("invalid", str(err).split(":")[0], str(err))
    if cfg.strategy in PARALLEL and model.runtime.world > 1:  # outside the engine
        return Refusal("invalid", "strategy", f"strategy: {cfg.strategy} is not served with --tensor-parallel")
    if cfg.num_return_sequences != 1:
        return Refusal("invalid", "num_return_sequences", "num_return_sequences: a request decodes one sequence "
                       "here (the OpenAI routes take n)")
    if cfg.beam_size > limits.max_beam_size:
        return Refusal("too_long", "beam_size", f"beam_size: {cfg.beam_size} > the server's limit "
                                                f"{limits.max_beam_size}")
    if given and cfg.max_new_tokens > limits.max_new_tokens:
        return Refusal("too_long", "max_new_tokens", f"max_new_tokens: {cfg.max_new_tokens} > the server's "
                                                     f"limit {limits.max_new_tokens}")
    return cfg.replace(max_new_tokens=min(cfg.max_new_tokens or limits.max_new_tokens, limits.max_new_tokens))
