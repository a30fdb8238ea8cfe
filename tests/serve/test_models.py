"""``aiayn serve --models DIR`` (``serve/models.py``, ``serve/models_server.py``): the folder's models behind one
port, loaded on demand within a budget, the least recently used idle one unloaded, pinned ones kept, idle ones reaped,
a request that finds no room waiting (bounded)."""

import asyncio
import concurrent.futures
import shutil
import time
from types import SimpleNamespace

import httpx
import pytest
import torch

from aiayn.serve.limits import Limits
from aiayn.serve.models import ModelPool, found_models, weight_bytes
from aiayn.serve.models_server import models_app
from aiayn.serve.server import model_loader as loader

from conftest import run_main, serving

OPTIONS = {"int8": False, "int4": False, "bf16": False, "kv_cache_dtype": None}


@pytest.fixture(scope="module")
def folder(lm_run, tmp_path_factory):
    """Three copies of the tiny language model (a, b, c) and a file that is no model."""
    root = tmp_path_factory.mktemp("models")
    for name in "abc":
        shutil.copytree(lm_run / "best", root / name)
    (root / "notes.txt").write_text("not a model")
    return root


def _complete(url: str, model: str) -> tuple[int, str]:
    r = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": "the cat ", "max_tokens": 8,
                                                   "temperature": 0}, timeout=120)
    return r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200 else r.text


def test_a_burst_for_three_models_in_a_two_model_budget_loses_none(folder):
    limits = Limits()
    pool = ModelPool(found_models(folder), loader(limits, None, OPTIONS), most=2)
    with serving(models_app(pool, limits, None), limits) as url:
        listed = httpx.get(f"{url}/v1/models").json()["data"]
        assert [(m["id"], m["status"]["value"]) for m in listed] == [(n, "unloaded") for n in "abc"]
        want = _complete(url, "a")
        assert want[0] == 200 and want[1]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            answers = list(ex.map(lambda m: _complete(url, m), "abcabcabcabc"))
        assert answers == [want] * 12
        health = httpx.get(f"{url}/health").json()
        assert health["most_loaded_at_once"] == 2 and len(health["loaded"]) == 2
        assert sum(health["loads"].values()) >= 3 and set(health["loads"]) == set("abc")
        unknown = httpx.post(f"{url}/v1/completions", json={"model": "d", "prompt": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        assert httpx.post(f"{url}/v1/completions", content=b"{not json").status_code == 404


def test_a_memory_budget_for_one_model_keeps_one_and_reloads_the_other(folder):
    limits = Limits()
    load = loader(limits, None, OPTIONS)
    one = weight_bytes(load("a", folder / "a")[0].product.model)
    pool = ModelPool(found_models(folder), load, memory=int(one * 1.5))
    with serving(models_app(pool, limits, None), limits) as url:
        for model in "aba":
            assert _complete(url, model)[0] == 200
        health = httpx.get(f"{url}/health").json()
        assert health["loaded"] == ["a"] and health["loads"] == {"a": 2, "b": 1} and health["weights_bytes"] == one


def test_a_pinned_model_is_loaded_at_the_start_and_an_idle_one_is_reaped(folder):
    limits = Limits()
    pool = ModelPool(found_models(folder), loader(limits, None, OPTIONS), ttl=0.3, pinned=("c",))
    with serving(models_app(pool, limits, None), limits) as url:
        assert httpx.get(f"{url}/health").json()["loaded"] == ["c"]
        assert _complete(url, "a")[0] == 200
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health").json()["loaded"] != ["c"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(f"{url}/health").json()["loaded"] == ["c"]


def _fake_load(name, path):
    """A stand-in for a model's load: a module of 1,000 float32 weights and a scheduler that can stop."""
    stopped = []
    served = SimpleNamespace(product=SimpleNamespace(model=torch.nn.Linear(10, 100, bias=False)),
                             scheduler=SimpleNamespace(stop=lambda: stopped.append(name)), stopped=stopped)
    return served, object()


def test_a_request_that_finds_no_room_waits_for_a_model_to_go_idle_then_gives_up(tmp_path):
    for name in "ab":
        (tmp_path / f"{name}.gguf").write_bytes(b"x")
    pool = ModelPool(found_models(tmp_path), _fake_load, most=1, wait_s=0.3)

    async def run() -> None:
        a = await pool.acquire("a")
        assert weight_bytes(a.served.product.model) == 4000 and a.bytes == 4000
        with pytest.raises(TimeoutError):  # "a" busy the whole time: no room for "b"
            await pool.acquire("b")
        waiting = asyncio.create_task(pool.acquire("b"))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # waits while "a" is busy
        await pool.release(a)
        b = await waiting  # "a" went idle: unloaded, "b" loaded
        assert [e.name for e in pool.loaded()] == ["b"] and pool.entries["a"].app is None and b.open == 1

    asyncio.run(run())


def test_serve_models_refuses_one_models_flags_and_a_folder_without_models(folder, tmp_path):
    done = run_main("serve", "--models", str(folder), "--lora", "x=y")
    assert done.returncode == 2 and "--lora is for one model" in done.stderr and len(done.stderr.splitlines()) == 1
    empty = run_main("serve", "--models", str(tmp_path))
    assert empty.returncode == 2 and "no checkpoint folder" in empty.stderr, empty
    both = run_main("serve", "--models", str(folder), "--checkpoint", str(folder / "a"))
    assert both.returncode == 2 and "not allowed with" in both.stderr
