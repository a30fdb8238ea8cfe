"""The compiled decoding step (inference/compiled.py): when it is taken, how it falls back, and (long) that the
compiled graph decodes as the eager model does, one graph for every cache size."""

import os

import pytest
import torch

from aiayn import DecoderOnly, EncoderDecoder
from aiayn.decoding.generation import generate
from aiayn.inference import compiled, precision
from aiayn.inference.precision import inference_copy
from aiayn.model import cpu

from conftest import SMOLLM2, chat_checkpoint, greedy_steps, run_main, tiny


def _lm(**changes) -> DecoderOnly:
    torch.manual_seed(0)
    return DecoderOnly(tiny(arch="decoder-only", positions="rope", n_kv_heads=2, max_len=128, **changes)).eval()


def test_the_compile_mode_decides_and_says_why_a_model_decodes_eagerly(tmp_path, monkeypatch):
    """off, a translation model, a split model, no C++ compiler, and under auto a small model, a packed float one or one
    generation without a kept graph (or a short one) are eager, each with its reason; on with a compiler compiles;
    an unknown mode is refused."""
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    lm = _lm()
    monkeypatch.setattr(compiled, "compiler", lambda: "/usr/bin/g++")
    assert compiled.why_eager(lm, "off") == "--compile off"
    assert "decoder-only" in compiled.why_eager(EncoderDecoder(tiny()), "on")
    assert compiled.why_eager(lm, "on") is None
    assert "below the 100M" in compiled.why_eager(lm, "auto")
    dense = inference_copy(lm, few_rows=True)  # its linear layers' weights are no parameters, yet count
    monkeypatch.setattr(compiled, "AUTO_PARAMETERS", sum(p.numel() for p in lm.parameters()))
    assert precision.weight_count(dense) == sum(p.numel() for p in lm.parameters())  # the tied head counted once
    assert compiled.why_eager(dense, "auto") is None
    monkeypatch.setattr(compiled, "AUTO_PARAMETERS", 0)
    assert not compiled.frozen(dense)  # float32 dense (aiayn::f32_mm): its graph kept
    monkeypatch.setattr(cpu, "packing_pays", lambda: True)  # float32 packed by oneDNN: a frozen graph, not kept
    assert "--int8 and --int4" in compiled.why_eager(inference_copy(lm), "auto")
    monkeypatch.setattr(cpu, "packing_pays", lambda: False)  # float32 kept unpacked: its graph is kept too
    assert compiled.why_eager(inference_copy(lm), "auto") is None
    assert compiled.why_eager(inference_copy(lm, int4=True), "auto") is None  # a session: chat, a server
    quantized = inference_copy(lm, int4=True)
    assert "no compiled step kept" in compiled.why_eager(quantized, "auto", tokens=2000)
    compiled.saved_path(quantized).parent.mkdir(parents=True)
    compiled.saved_path(quantized).write_bytes(b"kept")  # a graph kept by an earlier chat
    assert "24 new tokens, fewer than the 400" in compiled.why_eager(quantized, "auto", tokens=24)
    assert compiled.why_eager(quantized, "auto", tokens=400) is None
    assert compiled.why_eager(lm, "on", tokens=1) is None
    assert "CPU" in compiled.why_eager(lm, "on", "cuda")
    monkeypatch.setattr(lm.runtime, "world", 2)
    assert "split over processes" in compiled.why_eager(lm, "on")
    monkeypatch.setattr(compiled, "compiler", lambda: None)
    assert "no C++ compiler" in compiled.why_eager(_lm(), "on")
    with pytest.raises(ValueError, match="--compile: one of auto, on, off"):
        compiled.why_eager(lm, "always")


def test_the_cache_folder_keeps_the_most_recently_used_compiled_steps(tmp_path):
    """``prune``: the 16 most recently used step files stay, older ones go; other files are not touched."""
    for i in range(20):
        path = tmp_path / f"step-{i:02d}-row.bin"
        path.write_bytes(b"graph")
        os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / "notes.txt").write_text("mine")
    os.utime(tmp_path / "step-00-row.bin")  # used just now
    compiled.prune(tmp_path)
    kept = sorted(path.name for path in tmp_path.iterdir())
    assert kept == ["notes.txt", "step-00-row.bin"] + [f"step-{i:02d}-row.bin" for i in range(5, 20)]


def test_a_compile_that_fails_leaves_the_eager_step_with_one_line(monkeypatch):
    """The compile raising (here the warm-up) detaches the step and says why in one line; the model still
    decodes, as it did."""
    lm = _lm()
    ids = torch.tensor([[5, 6, 7]])
    before = generate(lm, ids, "greedy", max_new_tokens=6, min_new_tokens=6)
    monkeypatch.setattr(compiled, "compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(compiled, "warm_up",
                        lambda model, static: (_ for _ in ()).throw(RuntimeError("no kernel\nmore")))
    said = []
    assert compiled.attach(lm, "on", say=said.append) is False
    assert lm.runtime.static is None and said[-1] == "decoding eagerly: it did not compile (RuntimeError: no kernel)"
    assert generate(lm, ids, "greedy", max_new_tokens=6, min_new_tokens=6) == before


def test_generate_says_on_standard_error_why_it_decodes_eagerly(tmp_path, monkeypatch):
    """aiayn generate (and chat) --compile on without a C++ compiler: the line on standard error, the text still
    written; --compile auto (which would not compile this small model anyway) and off say nothing."""
    folder = chat_checkpoint(tmp_path / "lm")
    monkeypatch.setattr(compiled, "compiler", lambda: None)
    done = run_main("generate", "--checkpoint", str(folder), "--prompt", "hello", "--max-new-tokens", "3",
                    "--temperature", "0", "--compile", "on")
    assert done.returncode == 0, done
    assert "aiayn: decoding eagerly: no C++ compiler (g++, c++ or clang++) on PATH" in done.stderr
    chat = run_main("chat", "--checkpoint", str(folder), "--compile", "on", stdin="/exit\n")
    assert chat.returncode == 0 and "aiayn: decoding eagerly: no C++ compiler" in chat.stderr, chat
    auto = run_main("generate", "--checkpoint", str(folder), "--prompt", "hello", "--max-new-tokens", "3",
                    "--temperature", "0", "--compile", "auto")
    assert auto.returncode == 0 and "decoding eagerly" not in auto.stderr  # auto's own choice is not news
    quiet = run_main("generate", "--checkpoint", str(folder), "--prompt", "hello", "--max-new-tokens", "3",
                     "--temperature", "0", "--compile", "off")
    assert quiet.returncode == 0 and "decoding eagerly" not in quiet.stderr and quiet.stdout == done.stdout


@pytest.mark.long
def test_the_compiled_step_decodes_as_the_eager_one_with_one_graph_for_every_cache_size(tmp_path, monkeypatch):
    """A small model with a sliding layer, compiled (Inductor, C++): greedy text equal token for token to the eager
    model's at two cache sizes and from a prompt cache, with no recompile after the warm-up."""
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    lm = inference_copy(_lm(n_decoder_layers=2, layer_types=["sliding", "full"], sliding_window=6))
    ids = torch.tensor([[5, 6, 7, 8]])
    eager = [generate(lm, ids, "greedy", max_new_tokens=n, min_new_tokens=n) for n in (9, 40)]
    said = []
    assert compiled.attach(lm, "on", say=said.append), said
    assert said[0].startswith("compiling the decoding step") and said[1].startswith("compiled the decoding step in")
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert [generate(lm, ids, "greedy", max_new_tokens=n, min_new_tokens=n) for n in (9, 40)] == eager
    assert any((tmp_path / "inductor").iterdir())  # Inductor's caches in aiayn's cache folder


@pytest.mark.long
def test_the_compiled_step_verifies_any_number_of_guesses_in_one_graph(tmp_path, monkeypatch):
    """Speculative decoding through the compiled step (``columns``): drafted by an eager twin of itself (every guess
    kept, so each pass guesses 2 more, 4 to 16), each pass of the model verifies its guesses through the one graph
    of several columns (their count marked dynamic: no recompile, no other graph) and the text is plain greedy's."""
    from aiayn.decoding.speculative import SpeculativeStats

    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    lm, twin = (inference_copy(_lm(n_decoder_layers=2, layer_types=["sliding", "full"], sliding_window=6))
                for _ in range(2))
    ids = torch.tensor([[5, 6, 7, 8]])
    plain = generate(lm, ids, "greedy", max_new_tokens=60, min_new_tokens=60)
    assert compiled.attach(lm, "on", say=lambda line: None, columns=True)
    graph, widths = lm.runtime.static.graphs["columns"], []
    lm.runtime.static.graphs["columns"] = lambda *args: widths.append(args[0].size(1)) or graph(*args)
    stats = SpeculativeStats()
    with torch._dynamo.config.patch(error_on_recompile=True):
        drafted = generate(lm, ids, "greedy", max_new_tokens=60, min_new_tokens=60, draft=twin,
                           speculative_stats=stats)
    assert drafted == plain and stats.accepted > 0
    assert widths == [5, 7, 9, 11, 13] and stats.main_passes == 7  # the prompt's pass and the last (its guesses
    # reach the cache's last slot, which a static step leaves to the eager one) are eager


@pytest.mark.long
def test_the_compiled_step_attends_a_span_of_a_long_cache_not_the_whole_cache(tmp_path, monkeypatch):
    """Compiled (its graph traced by the warm-up), a full layer attends only the slots up to the span past the
    column, as the eager static step does: slots after it hold NaN and the logits stay those of the eager model,
    so a cache of many times SPAN costs a short text no more than one of SPAN (a graph traced with span and capacity
    equal took one for the other: 27 ms a SmolLM2 --int4 token at 4,096 columns against 5 ms at 256)."""
    from aiayn.model.static import SPAN

    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    lm = inference_copy(_lm(n_decoder_layers=2))  # max_len 128: a cache of 2 x SPAN
    prompts = torch.tensor([[5, 6, 7, 8]])
    eager, _ = greedy_steps(lm, prompts, 12, capacity=2 * SPAN, poison=True)
    assert compiled.attach(lm, "on", say=lambda line: None)
    with torch._dynamo.config.patch(error_on_recompile=True):
        steps, _ = greedy_steps(lm, prompts, 12, capacity=2 * SPAN, poison=True)
    assert all(torch.isfinite(t).all() for t in steps)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(eager, steps, strict=True))


@pytest.mark.long
def test_a_compiled_step_is_kept_loaded_at_the_next_start_and_compiled_again_where_its_file_is_broken(tmp_path,
                                                                                                     monkeypatch):
    """An int4 model's step (a graph for one row, one for more) is compiled ahead of time and kept in aiayn's cache
    folder; a second copy of the model (a later start) loads both without compiling and decodes the same text at
    two cache sizes, one row and three padded in front; a broken file is compiled again and replaced."""
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))

    def start(said: list[str]) -> DecoderOnly:
        lm = inference_copy(_lm(n_decoder_layers=2, layer_types=["sliding", "full"], sliding_window=6), int4=True)
        assert compiled.attach(lm, "on", say=said.append, batches=True), said
        return lm

    def texts(lm: DecoderOnly) -> list:
        """Greedy at two cache sizes, one row, then three rows of unequal prompts (padded in front)."""
        return [generate(lm, ids, "greedy", max_new_tokens=n, min_new_tokens=n) for n in (9, 40)] + [
            generate(lm, rows, "greedy", max_new_tokens=n, min_new_tokens=n) for n in (9, 40)]

    ids, rows = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[0, 0, 5, 6], [9, 10, 11, 12], [0, 13, 14, 15]])
    eager = texts(inference_copy(_lm(n_decoder_layers=2, layer_types=["sliding", "full"], sliding_window=6),
                                 int4=True))
    first, later, broken = [], [], []
    lm = start(first)
    saved = [compiled.saved_path(lm, kind) for kind in ("row", "rows")]
    assert first[0].startswith("compiling the decoding step") and all(path.is_file() for path in saved)
    assert not lm.runtime.static.loaded and texts(lm) == eager and set(lm.runtime.static.graphs) == {"row", "rows"}
    monkeypatch.setattr(torch, "compile", None)  # a later start must not compile
    lm = start(later)
    assert len(later) == 1 and later[0].startswith("loaded the compiled decoding step in") and lm.runtime.static.loaded
    assert texts(lm) == eager
    monkeypatch.undo()
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    saved[1].write_bytes(b"not a compiled step")
    lm = start(broken)
    assert broken[-1].startswith("compiled the decoding step in") and not lm.runtime.static.loaded
    assert saved[1].read_bytes() != b"not a compiled step"
    assert texts(lm) == eager


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2)
def test_aiayn_generate_compiles_the_real_int4_model_and_says_the_same(tmp_path, monkeypatch):
    """SmolLM2-135M-Instruct imported, ``aiayn generate --int4 --compile on`` on a fresh cache folder: it writes
    greedy's text at once (eager) while a child compiles the step behind it, and says the child goes on; the child
    keeps the very step the command expects, and that step, loaded, writes the same text. Two tokens, " Paris" and
    ".": the third is a near tie between the end of the text and a new line, which bfloat16 activations rounded
    one way eager and the other compiled on an Intel Xeon with AMX."""
    import time

    from aiayn.inference.generator import TextGenerator

    folder = tmp_path / "smollm2"
    assert run_main("import", str(SMOLLM2), "--output", str(folder)).returncode == 0
    args = ["generate", "--checkpoint", str(folder), "--prompt", "The capital of France is", "--int4",
            "--max-new-tokens", "2", "--temperature", "0"]
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    on = run_main(*args, "--compile", "on")
    off = run_main(*args, "--compile", "off")
    assert on.returncode == 0 and off.returncode == 0, (on, off)
    assert "compiling the decoding step behind the decoding" in on.stderr, on.stderr
    assert "the compile behind the decoding goes on" in on.stderr, on.stderr
    assert on.stdout == off.stdout and off.stdout.strip() == "Paris."
    generator = TextGenerator.from_checkpoint(folder, int4=True)
    kept = compiled.saved_path(generator.model)
    for _ in range(6000):  # the child: a few minutes on 2 cores
        if kept.is_file():
            break
        time.sleep(0.1)
    said = []
    assert compiled.attach(generator.model, "on", say=said.append) and said[0].startswith("loaded the compiled")
    assert generator.generate("The capital of France is", max_new_tokens=2, strategy="greedy")[0].strip() == "Paris."


def test_a_server_compiles_on_its_decoding_thread_before_any_request(monkeypatch):
    """``serve.server.compile_first``: the step is attached by a chore on the scheduler's decoding thread (whose
    compute threads the kernels are built for), queued before any request; a translation model has none."""
    import threading

    from aiayn.serve.scheduler import Scheduler
    from aiayn.serve.server import compile_first

    lm = _lm()
    scheduler = Scheduler(lm, max_batch=2, capacity=32)
    seen = []
    monkeypatch.setattr(compiled, "compiler", lambda: None)
    future = compile_first(lm, {"batches": True}, scheduler, "on", "cpu", say=lambda line: seen.append(
        (threading.current_thread().name, line)))
    assert not seen  # queued: the thread has not started
    scheduler.start()
    try:
        assert future.result(timeout=30) is False
    finally:
        scheduler.stop()
    assert seen == [("aiayn-decode", "decoding eagerly: no C++ compiler (g++, c++ or clang++) on PATH: install one "
                                     "to compile")]
    assert compile_first(EncoderDecoder(tiny()), {"batches": True}, scheduler, "on", "cpu") is None


@pytest.mark.long
@pytest.mark.parametrize("options", [{"dense": False}, {}, {"int4": True}],
                         ids=["float-frozen", "float-ahead-of-time", "int4-ahead-of-time"])
def test_a_step_under_inference_mode_after_the_warm_up_decodes_alike(tmp_path, monkeypatch, options):
    """Warmed up under no_grad, then asked under ``torch.inference_mode`` (its tensors another kind): a frozen
    graph (float32 packed by oneDNN) compiles a second one instead of failing, one compiled ahead of time (float32
    dense, int4) takes them; the text equals the eager model's."""
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path))
    options = dict(options)
    frozen = not options.pop("dense", True)
    monkeypatch.setattr(cpu, "packing_pays", lambda: True)  # float32 packed (frozen) where not dense
    lm = inference_copy(_lm(n_decoder_layers=1), few_rows=not frozen, **options)
    assert compiled.frozen(lm) is frozen
    ids = torch.tensor([[5, 6, 7, 8]])
    eager = generate(lm, ids, "greedy", max_new_tokens=8, min_new_tokens=8)
    assert compiled.attach(lm, "on", say=lambda line: None)
    with torch.inference_mode():
        assert generate(lm, ids, "greedy", max_new_tokens=8, min_new_tokens=8) == eager
    assert generate(lm, ids, "greedy", max_new_tokens=8, min_new_tokens=8) == eager



def test_a_server_opens_its_port_only_once_its_step_is_compiled(tmp_path, monkeypatch):
    """``build_app(..., ready=)`` (``run_server --compile``): uvicorn opens the port (and /health answers) after the
    compile chore has finished on the decoding thread, not while the first requests would wait behind it. The
    compile is held until the app's start waits on it, then the port is looked at before it is let go: a server
    that listened without waiting would be listening by then, however slowly it started."""
    import threading

    import httpx

    from aiayn.serve import server
    from aiayn.serve.limits import Limits

    from conftest import serving

    events, gate, waited_on, listening = [], threading.Event(), threading.Event(), threading.Event()

    def held_attach(model, *args, **kwargs):
        assert gate.wait(timeout=120), "never let go"
        events.append("compiled")
        return True

    monkeypatch.setattr(compiled, "attach", held_attach)
    product, embedder = server.load_product(str(chat_checkpoint(tmp_path / "ckpt")), None, "cpu", False, False,
                                            False, None, None)
    scheduler = server.build_scheduler(product, Limits(), 4, 5.0, None, embedder, "continuous")
    ready = server.compile_first(product.model, {"batches": True}, scheduler, "on", "cpu")
    add = ready.add_done_callback
    ready.add_done_callback = lambda fn: waited_on.set() or add(fn)  # the app's start awaits it (wrap_future)
    app = server.build_app(server.Served(product, scheduler, Limits(), "tiny", embedder), ready=ready)

    def serve() -> None:
        with serving(app, Limits()) as url:
            events.append("listening")
            listening.set()
            assert httpx.get(f"{url}/health").status_code == 200

    thread = threading.Thread(target=serve)
    thread.start()
    while not (waited_on.is_set() or listening.is_set() or not thread.is_alive()):
        waited_on.wait(0.01)
    assert waited_on.is_set() and not listening.is_set(), events  # the port stays shut while compiling
    gate.set()
    thread.join(timeout=60)
    assert events == ["compiled", "listening"]
