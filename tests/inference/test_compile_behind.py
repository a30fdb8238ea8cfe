"""The decoding step compiled behind the decoding (inference/compile_behind.py): a step taken over between two tokens
gives the tokens of either step alone; a server answers at once, says on /health and /metrics that its step is
compiling, takes the step over when the child is done, or says in one line why it stays eager; (long) the real child
compiles a real checkpoint's step, the very one the server loads."""

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from aiayn import DecoderOnly
from aiayn.decoding.generation import generate
from aiayn.inference import compile_behind, compiled
from aiayn.inference.compiled import CompiledStep

from conftest import chat_checkpoint, serving, tiny

WAIT_FOR = "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.02)\n" \
           "print('the child says why', file=sys.stderr)\nsys.exit(int(sys.argv[2]))"


def test_a_step_taken_over_between_two_tokens_gives_the_tokens_of_either_alone():
    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", positions="rope", n_kv_heads=2, max_len=128)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    eager = generate(lm, ids, "greedy", max_new_tokens=24, min_new_tokens=24)
    step, taken = CompiledStep(lm, compiled=False), []  # the static step uncompiled: the graph's reference

    def counted(*args):
        logits = CompiledStep.__call__(step, *args)
        taken.append(logits is not None)
        return logits

    def on_token(_ids, _live):
        if len(taken) == 0 and on_token.seen == 8:  # between the 8th and the 9th token
            lm.runtime.static = counted
        on_token.seen += 1
    on_token.seen = 0
    try:
        switched = generate(lm, ids, "greedy", max_new_tokens=24, min_new_tokens=24, on_token=on_token)
        alone = generate(lm, ids, "greedy", max_new_tokens=24, min_new_tokens=24)
    finally:
        lm.runtime.static = None
    assert switched == eager == alone
    assert sum(taken) >= 15 + 23  # every step after the switch took the static step, then every step alone


def test_a_kept_step_is_loaded_by_a_thread_while_the_model_decodes_and_taken_over_between_two_tokens(monkeypatch):
    """A step kept already: ``compile_behind`` returns at once a :class:`LoadBehind` whose thread loads it (the load
    held here until the 8th token), the model decodes eagerly meanwhile, and the step is taken over between two
    tokens once loaded: greedy's tokens, said in one line."""
    import threading

    torch.manual_seed(0)
    lm = DecoderOnly(tiny(arch="decoder-only", positions="rope", n_kv_heads=2, max_len=128)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    eager = generate(lm, ids, "greedy", max_new_tokens=24, min_new_tokens=24)
    gate, said, loads = threading.Event(), [], []
    monkeypatch.setattr(compile_behind, "why_eager", lambda *args: None)
    monkeypatch.setattr(compile_behind, "saved_path", lambda model, kind="row": Path(__file__))  # a file: "kept"

    def load(model, *args, say=None, batches=False, columns=False):  # the kept step's load, held by the gate
        gate.wait()
        loads.append(model)
        return CompiledStep(model, compiled=False, batches=batches, columns=columns)
    monkeypatch.setattr(compile_behind, "prepared", load)
    behind = compile_behind.compile_behind(lm, "on", "cpu", "unused", {}, say=said.append)
    assert isinstance(behind, compile_behind.LoadBehind) and behind.waiting and lm.runtime.static is None

    def on_token(_ids, _live):
        on_token.seen += 1
        if on_token.seen == 8:
            gate.set()
            behind.wait()
        if behind.waiting and behind.done:
            behind.take_over()
    on_token.seen = 0
    try:
        switched = generate(lm, ids, "greedy", max_new_tokens=24, min_new_tokens=24, on_token=on_token)
        attached = lm.runtime.static
    finally:
        lm.runtime.static = None
    assert switched == eager and loads == [lm] and not behind.waiting and attached is behind.static is not None
    assert said == [said[0]] and said[0].startswith("loaded the compiled decoding step in")
    assert said[0].endswith("behind the decoding: decoding with it from here")


@pytest.fixture
def behind_server(tmp_path, monkeypatch):
    """A chat model served with ``--compile on`` whose step is compiled behind by a stand-in child (it exits with
    the status written to the file ``go``); the kept step's load stands in by the reference static step. Yields
    (URL, the file, the lines said, the scheduler)."""
    from aiayn.serve.limits import Limits

    go, said = tmp_path / "go", []
    stand_in_child(monkeypatch, go)
    app, scheduler = app_compiling_behind(tmp_path, said)
    with serving(app, Limits()) as url:
        yield url, go, said, scheduler
    scheduler.behind.stop()


def stand_in_child(monkeypatch, go) -> list:
    """The child stood in for by one that exits when the file ``go`` is there; the kept step's load by the
    reference static step (the models it was loaded for: the list returned), on the loading thread, never on the
    decoding's (a load there fails: the step is not taken over)."""
    taken = []
    monkeypatch.setattr(compiled, "compiler", lambda: "g++")
    monkeypatch.setattr(compile_behind.CompileBehind, "command",
                        staticmethod(lambda *args: [sys.executable, "-c", WAIT_FOR, str(go), "0"]))

    def loaded(model, *args, **kwargs):
        assert threading.current_thread().name == "aiayn-load-step", "loaded on the decoding's thread"
        taken.append(model)
        return CompiledStep(model, compiled=False, batches=kwargs.get("batches", False),
                            columns=kwargs.get("columns", False))
    monkeypatch.setattr(compile_behind, "prepared", loaded)
    return taken


def app_compiling_behind(tmp_path, said: list):
    """A tiny chat model's app with ``--compile on``, its step compiled behind (lines said to ``said``)."""
    from aiayn.serve import server
    from aiayn.serve.limits import Limits

    checkpoint = str(chat_checkpoint(tmp_path / "ckpt"))
    product, embedder = server.load_product(checkpoint)
    scheduler = server.build_scheduler(product, Limits(), 4, 5.0, None, embedder, "continuous")
    ready = server.compile_first(product.model, {"batches": True}, scheduler, "on", "cpu", said.append,
                                 behind=(checkpoint, {}))
    return server.build_app(server.Served(product, scheduler, Limits(), "tiny", embedder), ready=ready), scheduler


def _health_until(url: str, state: str) -> dict:
    for _ in range(600):
        health = httpx.get(f"{url}/health").json()
        if health["decoding_step"] == state:
            return health
        time.sleep(0.05)
    raise AssertionError(f"/health never said {state}: {health['decoding_step']}")


def _ask(url: str) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "temperature": 0}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]["content"]


def test_a_server_answers_while_its_step_compiles_behind_and_takes_it_over(behind_server):
    url, go, said, _ = behind_server
    assert httpx.get(f"{url}/health").json()["decoding_step"] == "compiling"
    assert "aiayn_compiled_step 0.0" in httpx.get(f"{url}/metrics").text
    before = _ask(url)  # answered eagerly while the child compiles
    go.write_text("")
    _health_until(url, "compiled")
    assert "aiayn_compiled_step 1.0" in httpx.get(f"{url}/metrics").text
    assert _ask(url) == before
    assert said[0].startswith("compiling the decoding step behind the decoding")
    assert said[-1].startswith("compiled the decoding step in") and "behind the decoding" in said[-1]


def test_a_compile_behind_that_fails_leaves_the_eager_step_with_the_childs_reason(behind_server):
    url, _, said, scheduler = behind_server
    scheduler.behind.process.kill()  # the child dies: its compile failed
    _health_until(url, "eager")
    assert said[-1].startswith("decoding eagerly: the compile behind the decoding failed (")


def test_a_served_int4_draft_is_compiled_behind_too_and_the_server_answers_at_once(tmp_path, monkeypatch):
    """``aiayn serve --draft int4 --compile on``: the served model's step (with its verifying graph) and its int4
    draft's are both compiled by (stand-in) children, the draft's from the checkpoint with ``--int4``; the server
    answers drafted requests meanwhile and takes both steps over when the children are done, the text the same."""
    from aiayn.inference.draft import draft_source
    from aiayn.serve import server
    from aiayn.serve.limits import Limits

    go, said = tmp_path / "go", []
    taken, commands = stand_in_child(monkeypatch, go), []
    stand_in = compile_behind.CompileBehind.command
    monkeypatch.setattr(compile_behind.CompileBehind, "command",
                        staticmethod(lambda *args: commands.append(args[1:]) or stand_in(*args)))
    checkpoint = str(chat_checkpoint(tmp_path / "ckpt"))
    product, embedder = server.load_product(checkpoint, draft="int4")
    scheduler = server.build_scheduler(product, Limits(), 4, 5.0, None, embedder, "continuous")
    ready = server.compile_first(product.model, {"batches": True, "columns": True}, scheduler, "on", "cpu",
                                 said.append, behind=(checkpoint, {}))
    server.compile_first(product.draft.model, {}, scheduler, "on", "cpu", said.append, draft=True,
                         behind=draft_source(checkpoint, "int4", {"int8": False}))
    app = server.build_app(server.Served(product, scheduler, Limits(), "tiny", embedder), ready=ready)
    with serving(app, Limits()) as url:
        before = _ask(url)  # both children still at work: answered eagerly
        assert commands == [(checkpoint, {}, {"batches": True, "columns": True}),
                            (checkpoint, {"int4": True}, {"batches": False, "columns": False})]
        go.write_text("")
        _health_until(url, "compiled")
        for _ in range(200):
            if len(taken) == 2:
                break
            time.sleep(0.05)
        assert _ask(url) == before and {id(m) for m in taken} == {id(product.model), id(product.draft.model)}
    scheduler.stop()


def test_a_chat_answers_at_once_and_takes_the_step_over_between_two_tokens(tmp_path, monkeypatch):
    """``aiayn chat --compile on`` where no step is kept: the first reply decodes eagerly while the (stand-in) child
    runs; once it is done the step is taken over between two tokens, said in one line; the replies are greedy's."""
    from conftest import run_main

    folder, go = chat_checkpoint(tmp_path / "lm"), tmp_path / "go"
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    taken = stand_in_child(monkeypatch, go)
    go.write_text("")  # the child is done at once: taken over during the first reply, whose steps take 20 ms more
    step = DecoderOnly.step
    monkeypatch.setattr(DecoderOnly, "step", lambda *args, **kwargs: time.sleep(0.02) or step(*args, **kwargs))
    question = "what is inside\nand then?\n"
    chat = run_main("chat", "--checkpoint", str(folder), "--compile", "on", "--temperature", "0",
                    "--max-new-tokens", "40", stdin=question)
    plain = run_main("chat", "--checkpoint", str(folder), "--compile", "off", "--temperature", "0",
                     "--max-new-tokens", "40", stdin=question)
    assert chat.returncode == 0 and chat.stdout == plain.stdout, chat.stderr
    assert "compiling the decoding step behind the decoding" in chat.stderr
    assert "behind the decoding: decoding with it from here" in chat.stderr and len(taken) == 1


def test_generate_starts_at_once_and_takes_the_step_over_between_two_tokens(tmp_path, monkeypatch):
    """``aiayn generate --compile on`` where no step is kept decodes eagerly at once while the (stand-in) child runs,
    takes the step over between two tokens when it is done, and prints greedy's text; a child not done by the end
    goes on, said in one line."""
    from conftest import run_main

    folder, go = chat_checkpoint(tmp_path / "lm"), tmp_path / "go"
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    taken = stand_in_child(monkeypatch, go)
    step = DecoderOnly.step
    monkeypatch.setattr(DecoderOnly, "step", lambda *args, **kwargs: time.sleep(0.02) or step(*args, **kwargs))
    flags = ("--checkpoint", str(folder), "--prompt", "what is inside", "--temperature", "0", "--max-new-tokens",
             "40", "--min-new-tokens", "40")
    left = run_main("generate", *flags, "--compile", "on")  # the child never done: it goes on
    assert left.returncode == 0 and "the compile behind the decoding goes on" in left.stderr and not taken
    go.write_text("")
    done = run_main("generate", *flags, "--compile", "on")
    plain = run_main("generate", *flags, "--compile", "off")
    assert done.returncode == 0 and done.stdout == plain.stdout == left.stdout, done.stderr
    assert "behind the decoding: decoding with it from here" in done.stderr and len(taken) == 1


def test_a_drafted_chat_has_its_verifying_passes_compiled_behind_too(tmp_path, monkeypatch):
    """``aiayn chat --draft ngram --compile on``: the child is asked for the graph of several tokens a row too
    (``--columns``), the step taken over has it, and the replies are those of the drafted chat without compiling."""
    from conftest import run_main

    folder, go = chat_checkpoint(tmp_path / "lm"), tmp_path / "go"
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    taken, commands = stand_in_child(monkeypatch, go), []
    stand_in = compile_behind.CompileBehind.command
    monkeypatch.setattr(compile_behind.CompileBehind, "command",
                        staticmethod(lambda *args: commands.append(args[3]) or stand_in(*args)))
    go.write_text("")
    question = "what is inside what is inside\nand then?\n"
    flags = ("--checkpoint", str(folder), "--draft", "ngram", "--temperature", "0", "--max-new-tokens", "40")
    chat = run_main("chat", *flags, "--compile", "on", stdin=question)
    plain = run_main("chat", *flags, "--compile", "off", stdin=question)
    assert chat.returncode == 0 and chat.stdout == plain.stdout, chat.stderr
    assert commands == [{"batches": False, "columns": True}]
    assert len(taken) == 1 and taken[0].runtime.static.kinds == ("row", "columns")


def test_a_chat_drafted_by_its_int4_copy_compiles_both_steps_behind(tmp_path, monkeypatch):
    """``aiayn chat --draft int4 --compile on``: two (stand-in) children, the model's (its verifying graph too) and
    the int4 draft's (the checkpoint loaded with ``--int4``); the chat answers as without compiling and takes both
    steps over."""
    from conftest import run_main

    folder, go = chat_checkpoint(tmp_path / "lm"), tmp_path / "go"
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    taken, commands = stand_in_child(monkeypatch, go), []
    stand_in = compile_behind.CompileBehind.command
    monkeypatch.setattr(compile_behind.CompileBehind, "command",
                        staticmethod(lambda *args: commands.append(args[1:]) or stand_in(*args)))
    go.write_text("")
    flags = ("--checkpoint", str(folder), "--draft", "int4", "--temperature", "0", "--max-new-tokens", "40")
    chat = run_main("chat", *flags, "--compile", "on", stdin="what is inside\n")
    plain = run_main("chat", *flags, "--compile", "off", stdin="what is inside\n")
    assert chat.returncode == 0 and chat.stdout == plain.stdout, chat.stderr
    model_flags = {"int8": False, "int4": False, "bf16": False, "kv_cache_dtype": None}  # switches become flags
    assert commands == [(str(folder), model_flags, {"batches": False, "columns": True}),
                        (str(folder), {"int4": True}, {"batches": False, "columns": False})]
    assert len(taken) == 2


@pytest.mark.long
def test_the_child_compiles_the_step_the_server_loads(tmp_path, monkeypatch):
    """The real child (``python -m aiayn.inference.compile_behind``) on a fresh cache folder: the step it keeps is the
    one the parent expects (the same digest) and loads; greedy text the same before and after."""
    from aiayn.serve.limits import Limits

    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    said = []
    app, _ = app_compiling_behind(tmp_path, said)
    with serving(app, Limits()) as url:
        before = _ask(url)
        for _ in range(3000):  # a tiny model's two graphs: a minute or two
            if httpx.get(f"{url}/health").json()["decoding_step"] != "compiling":
                break
            time.sleep(0.1)
        assert httpx.get(f"{url}/health").json()["decoding_step"] == "compiled", said
        assert _ask(url) == before
    assert said[-1].startswith("compiled the decoding step in"), said
