"""The one scheduler: translation requests (greedy, beam, seeded sampling) that arrive while others decode join
the running batch and equal each request alone; a cancelled beam request gives its rows back at once."""

import time

import pytest
import torch

from aiayn import generate
from aiayn.decoding.config import DecodingConfig
from aiayn.serve.scheduler import Scheduler, TranslationRequest

from conftest import random_ids

OPTIONS = [DecodingConfig(strategy="greedy", max_new_tokens=12, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=4, length_penalty=0.6, max_new_tokens=9, max_len_b=None),
           DecodingConfig(strategy="sample", seed=3, max_new_tokens=15, max_len_b=None),
           DecodingConfig(strategy="beam", beam_size=2, min_new_tokens=3, max_new_tokens=5, max_len_b=None)]


def wait_all(jobs, timeout: float = 60) -> list[list[int]]:
    return [job.future.result(timeout=timeout) for job in jobs]


@pytest.mark.parametrize("static", [False, True])
def test_translations_arriving_while_others_decode_equal_each_alone(model, static):
    torch.manual_seed(2)
    sources = [random_ids(1, 3 + i % 7, vocab=30)[0].tolist() for i in range(16)]
    jobs = [TranslationRequest(src, OPTIONS[i % len(OPTIONS)]) for i, src in enumerate(sources)]
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
    doomed = TranslationRequest(random_ids(1, 6, vocab=30)[0].tolist(), long)
    others = [TranslationRequest(random_ids(1, 4, vocab=30)[0].tolist(), short) for _ in range(2)]
    scheduler.start()
    try:
        scheduler.submit(doomed)
        deadline = time.monotonic() + 30
        while scheduler.engine.rows < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert scheduler.engine.rows == 4  # beam size 4: four rows
        doomed.cancel()
        for job in others:
            scheduler.submit(job)
        outputs = wait_all(others)
    finally:
        scheduler.stop()
    assert doomed.future.cancelled() and doomed.finish_reason == "cancelled" and scheduler.cancelled == 1
    assert scheduler.engine.rows == 0 and scheduler.open_requests == 0
    for job, out in zip(others, outputs, strict=True):
        assert out == generate(model, torch.tensor([job.source]), config=short)[0]


def test_a_request_the_engine_cannot_decode_fails_alone(model):
    scheduler = Scheduler(model, max_batch=4, capacity=40)
    bad = TranslationRequest([5, 6], DecodingConfig(strategy="greedy", num_return_sequences=2, max_len_b=None,
                                                    max_new_tokens=4))
    good = TranslationRequest([5, 6, 7], OPTIONS[0])
    scheduler.start()
    try:
        scheduler.submit(bad)
        scheduler.submit(good)
        assert "num_return_sequences" in str(bad.future.exception(timeout=30))
        assert good.future.result(timeout=30) == generate(model, torch.tensor([[5, 6, 7]]), config=OPTIONS[0])[0]
    finally:
        scheduler.stop()
