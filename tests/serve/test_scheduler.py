"""The one scheduler: translation requests (greedy, beam, seeded sampling) that arrive while others decode join
the running batch and equal each request alone; a cancelled beam request gives its rows back at once; one
admission check refuses, typed, what the model cannot run or the limits forbid."""

import threading
import time
from concurrent.futures import Future

import pytest
import torch

from aiayn import generate
from aiayn.decoding.config import DecodingConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.serve.jobs import Finished
from aiayn.serve.limits import Limits
from aiayn.serve.scheduler import DecodeJob, Refused, Scheduler

from conftest import random_ids, tiny

OPTIONS = [DecodingConfig(strategy="greedy", max_new_tokens=12, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=4, length_penalty=0.6, max_new_tokens=9, max_len_b=None),
           DecodingConfig(strategy="sample", seed=3, max_new_tokens=15, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=2, min_new_tokens=3, max_new_tokens=5, max_len_b=None)]


def job_of(inputs: list[int], decoding: DecodingConfig) -> DecodeJob:
    """A job whose ``ended`` future gets its final event."""
    ended = Future()
    job = DecodeJob(inputs, decoding, lambda e: isinstance(e, Finished) and not ended.done() and ended.set_result(e))
    job.ended = ended
    return job


def wait_all(jobs, timeout: float = 60) -> list[list[int]]:
    return [job.ended.result(timeout=timeout).ids for job in jobs]


@pytest.mark.parametrize("static", [False, True])
def test_translations_arriving_while_others_decode_equal_each_alone(model, static):
    torch.manual_seed(2)
    sources = [random_ids(1, 3 + i % 7, vocab=30)[0].tolist() for i in range(16)]
    jobs = [job_of(src, OPTIONS[i % len(OPTIONS)]) for i, src in enumerate(sources)]
    scheduler = Scheduler(model, max_batch=12, capacity=40, static=static)
    scheduler.start()
    try:
        for i, job in enumerate(jobs):
            scheduler.submit(job)
            if i % 5 == 4:
                time.sleep(0.02)  # the next ones arrive while these decode
        outputs = wait_all(jobs)
    finally:
        scheduler.stop()
    for src, job, out in zip(sources, jobs, outputs, strict=True):
        assert out == generate(model, torch.tensor([src]), config=job.decoding)[0], job.decoding
    assert 4 < scheduler.largest_batch <= 12 and scheduler.open_requests == 0
    assert scheduler.steps < sum(len(o) + 1 for o in outputs)  # requests shared steps


def test_a_cancelled_beam_request_frees_its_rows_and_the_others_finish_as_alone(model):
    long = DecodingConfig(strategy="beam", beam_size=4, min_new_tokens=150, max_new_tokens=155, max_len_b=None)
    short = OPTIONS[0]
    scheduler = Scheduler(model, max_batch=8, capacity=160)
    doomed = job_of(random_ids(1, 6, vocab=30)[0].tolist(), long)
    others = [job_of(random_ids(1, 4, vocab=30)[0].tolist(), short) for _ in range(2)]
    scheduler.start()
    try:
        scheduler.submit(doomed)
        deadline = time.monotonic() + 30
        while scheduler.engine.rows < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert scheduler.engine.rows == 4  # beam size 4: four rows
        doomed.cancelled = True
        for job in others:
            scheduler.submit(job)
        outputs = wait_all(others)
    finally:
        scheduler.stop()
    assert doomed.ended.result(timeout=30).finish_reason == "cancelled" and scheduler.cancelled == 1
    assert scheduler.engine.rows == 0 and scheduler.open_requests == 0
    for job, out in zip(others, outputs, strict=True):
        assert out == generate(model, torch.tensor([job.inputs]), config=short)[0]


def test_the_admission_check_refuses_with_a_typed_reason_and_takes_the_rest(model):
    scheduler = Scheduler(model, max_batch=4, capacity=40, limits=Limits(max_new_tokens=30, max_beam_size=4))
    cases = {"num_return_sequences": DecodingConfig(strategy="sample", num_return_sequences=2),
             "strategy": DecodingConfig(strategy="mask-predict"),  # not a CMLM
             "beam_size": DecodingConfig(strategy="beam", beam_size=5),
             "max_new_tokens": DecodingConfig(strategy="greedy", max_new_tokens=31)}
    for name, decoding in cases.items():
        with pytest.raises(Refused) as refused:
            scheduler.submit(job_of([5, 6], decoding))
        assert refused.value.refusal.field == name, refused.value.refusal
        assert refused.value.refusal.kind == ("invalid" if name in ("strategy", "num_return_sequences") else "too_long")
    assert scheduler.submitted == 0
    good = job_of([5, 6, 7], OPTIONS[0])
    scheduler.start()
    try:
        scheduler.submit(good)
        assert wait_all([good]) == [generate(model, torch.tensor([[5, 6, 7]]), config=OPTIONS[0])[0]]
        assert good.ended.result().finish_reason in ("stop", "length")
    finally:
        scheduler.stop()
    lm = DecoderOnly(tiny(arch="decoder-only")).eval()
    busy = Scheduler(lm, max_batch=4, capacity=40, limits=Limits(max_streams=2))
    with pytest.raises(Refused) as refused:  # three at once over a limit of two open generations
        busy.submit(*(job_of([5, 6], DecodingConfig(strategy="greedy", max_new_tokens=4)) for _ in range(3)))
    assert refused.value.refusal.kind == "busy" and busy.submitted == 0
    long = job_of(list(range(5, 35)), DecodingConfig(strategy="greedy", max_new_tokens=20))
    with pytest.raises(Refused, match="30 \\+ 20 tokens exceed the model's 40"):
        busy.submit(long)


def test_finish_reasons_come_from_the_rows_group(model):
    """``length`` at the limit, ``stop`` at EOS: the group that ended the row says which."""
    scheduler = Scheduler(model, max_batch=4, capacity=60)
    short = job_of([5, 6, 7], DecodingConfig(strategy="greedy", max_new_tokens=1, max_len_b=None))
    free = job_of([5, 6, 7], DecodingConfig(strategy="greedy", max_new_tokens=40, max_len_b=None))
    scheduler.start()
    try:
        scheduler.submit(short, free)
        first, second = (job.ended.result(timeout=30) for job in (short, free))
    finally:
        scheduler.stop()
    assert first.finish_reason == "length" and len(first.ids) == 1
    alone = generate(model, torch.tensor([[5, 6, 7]]), "greedy", max_new_tokens=40, max_len_b=None)[0]
    assert second.ids == alone and second.finish_reason == ("length" if len(alone) == 40 else "stop")


def test_a_request_whose_first_token_fails_gets_the_error_and_the_others_go_on(model):
    """The prompt pass picks the first token: an error there (a grammar that fails) fails that request alone."""

    class Failing(DecodeJob):
        def group(self, model, *drafting):
            group, inputs, beams = super().group(model, *drafting)
            group.choose = lambda scores: (_ for _ in ()).throw(ValueError("a grammar error"))
            return group, inputs, beams

    failing, ended = Failing([5, 6, 7], OPTIONS[0], lambda e: None), Future()
    failing.emit = lambda e: isinstance(e, Finished) and not ended.done() and ended.set_result(e)
    fine = job_of([5, 6, 7, 8], OPTIONS[0])
    scheduler = Scheduler(model, max_batch=4, capacity=40)
    scheduler.start()
    try:
        scheduler.submit(failing)
        scheduler.submit(fine)
        event, out = ended.result(timeout=60), wait_all([fine])[0]
    finally:
        scheduler.stop()
    assert event.finish_reason == "error" and "a grammar error" in event.detail
    assert out == generate(model, torch.tensor([[5, 6, 7, 8]]), config=OPTIONS[0])[0]


def test_the_prefill_flags_reach_the_engine_and_a_long_prompt_joins_a_chunk_a_pass():
    """``--prefill-chunk``, ``--prefill-budget`` and ``--long-prefill-token-threshold`` (``Limits``) are the engine's:
    with chunks of 4 and no budget, a 30-token prompt that arrives while a request decodes is computed 4 columns a
    pass beside it (no pass of more than 5 columns), and both requests decode what they decode alone."""
    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, max_len=128)).eval()
    limits = Limits(prefill_chunk=4, prefill_budget=0.0, long_prefill_token_threshold=6)
    scheduler = Scheduler(lm, max_batch=4, capacity=100, limits=limits)
    engine = scheduler.engine
    assert (engine.prefill_chunk, engine.long_prefill, engine.chunks.columns, engine.chunks.budget) == (4, 6, 4, 0)
    decoding = DecodingConfig(strategy="greedy", min_new_tokens=40, max_new_tokens=40, max_len_b=None)
    short, long = random_ids(1, 3, vocab=30)[0].tolist(), random_ids(1, 30, vocab=30)[0].tolist()
    columns, started, submitted = [], Future(), threading.Event()
    forward, together = lm.decoder.forward, lm.decoder.forward_segments
    lm.decoder.forward = lambda x, *a, **k: columns.append(x.size(1)) or forward(x, *a, **k)
    lm.decoder.forward_segments = lambda x, parts: columns.append(x.size(1)) or together(x, parts)
    first = job_of(short, decoding)
    emit = first.emit

    def running(event: dict) -> None:
        if not started.done():  # its first token: held until the long prompt is submitted, so it is still running
            started.set_result(True)
            assert submitted.wait(timeout=60)
        emit(event)

    first.emit = running
    scheduler.start()
    try:
        scheduler.submit(first)
        started.result(timeout=60)  # decoding: the long prompt joins a running batch
        second = job_of(long, decoding)
        scheduler.submit(second)
        submitted.set()
        outputs = wait_all([first, second])
    finally:
        scheduler.stop()
        del lm.decoder.forward, lm.decoder.forward_segments
    assert max(columns) <= 5 and len(columns) >= 40 + 30 // 4, columns
    for prompt, out in zip((short, long), outputs, strict=True):
        assert out == generate(lm, torch.tensor([prompt]), config=decoding)[0]
