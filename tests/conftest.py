"""Shared test helpers."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from torch import Tensor

from aiayn import EncoderDecoder, ModelConfig

os.environ.setdefault("AIAYN_COMPILE", "off")  # the CLI's default --compile: a test that compiles says so
os.environ.setdefault("AIAYN_PACK", "1")  # float32 packed wherever oneDNN is, not as measured: the same on every CPU
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs two workers on the two cores: one compute thread
    os.environ["OMP_NUM_THREADS"] = "1"  # each, and in the processes the tests start, so none oversubscribe
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


CACHE = Path.home() / ".cache" / "aiayn"
SMOLLM2 = Path(os.environ.get("AIAYN_SMOLLM2", CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"))
GEMMA3 = Path(os.environ.get("AIAYN_GEMMA3", CACHE / "gemma-3-270m-q4_k_m.gguf"))
CLAUDE_CODE = CACHE / "claude-code" / "node_modules" / ".bin" / "claude"  # npm's Claude Code (make claude-code)
FETCHED_BY = {SMOLLM2: "make smollm2", GEMMA3: "make gemma3", CLAUDE_CODE: "make claude-code"}  # and what fetches each


def under_ci() -> bool:
    """Run by ``.ci/run`` (``CI`` set): the Makefile installed a compiler and fetched the real files, so a kernel
    build that fails or a file that is missing is a failure, never a skip."""
    return bool(os.environ.get("CI"))


def kernels_expected() -> bool:
    """Whether aiayn's kernels (``aiayn.kernels.load``) are loaded, for a test with a branch for each case: False
    only where there is no C++ compiler and this is not CI; a build that fails where a compiler is (or anything but
    a load under CI) fails the test."""
    from aiayn.kernels import compiler, load

    why = load()
    if why is None:
        return True
    if compiler() is None and not under_ci():
        return False
    pytest.fail(f"aiayn's kernels must load here (a compiler is on PATH, or this is CI): {why}", pytrace=False)


def require_kernels() -> None:
    """The test needs aiayn's kernels: skipped, saying why, where :func:`kernels_expected` says there can be none."""
    if not kernels_expected():
        from aiayn.kernels import load

        pytest.skip(f"{load()}: install g++ (make test does, as root) to test aiayn's kernels")


def assert_runs_its_kernel(layer, rows: int = 3) -> None:
    """A few rows through an ``Int8Linear`` / ``Int4Linear`` on aiayn's kernels come out as the op itself gives them
    (``aiayn::q8a8_mm`` / ``q4a8_mm`` on the layer's packing) bit for bit, and not as the float product of its
    dequantized weight (the int8 activations' rounding moves the op's result off it): the layer ran the kernel."""
    import torch.nn.functional as F

    from aiayn.model.quantized import Int4Linear

    x = torch.randn(rows, layer.in_features, generator=torch.Generator().manual_seed(rows)) * 3
    op = torch.ops.aiayn.q4a8_mm if isinstance(layer, Int4Linear) else torch.ops.aiayn.q8a8_mm
    want = op(x, layer.packed, layer.scales)[:, : layer.out_features]  # (rows, N)
    want = want if layer.bias is None else want + layer.bias
    with torch.no_grad():
        got = layer(x)
    assert torch.equal(got, want), "the layer's few rows did not go through its kernel"
    assert not torch.equal(got, F.linear(x, layer.dequantized(), layer.bias))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The marks ``kernels`` (:func:`require_kernels`) and ``real_files(PATH, ...)``: a missing real model file skips
    the test with the command that fetches it, but fails it under CI."""
    if item.get_closest_marker("kernels"):
        require_kernels()
    for mark in item.iter_markers("real_files"):
        for path in (p for p in mark.args if not Path(p).is_file()):
            why = f"the real model file is not at {path}: {FETCHED_BY.get(Path(path), 'fetch it')}"
            if under_ci():
                pytest.fail(f"{why} (under CI the Makefile fetches it)", pytrace=False)
            pytest.skip(why)


CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                        reason="no CUDA device here")])


@pytest.fixture(params=["cpu", CUDA])
def device_name(request) -> str:
    """Runs the test on the CPU and, where CUDA is present, again on the GPU: "cpu" or "cuda"."""
    return request.param


@pytest.fixture
def device(device_name):
    """As ``device_name``, and within the test tensors and modules are created on that device (``torch.device``
    as the default), so the test's own code is unchanged."""
    with torch.device(device_name):
        yield torch.device(device_name)


@pytest.fixture(params=[True, False], ids=["bf16-kernels", "no-bf16-kernels"])
def bf16_kernels(request, monkeypatch) -> bool:
    """Both of the CPU's branches on every machine: as if it computes in bfloat16 (``native_bf16``: int8 and int4
    with bfloat16 activations, bf16 training) and as if it does not (int8 with int8 activations, as two products
    where this CPU has no exact int8 dots; int4 with float32 ones; fp32 training), whatever this CPU has. Forced
    where the modules choose; not in ``packing_available``: oneDNN packs bfloat16 weights only on a CPU with AVX512
    at least (it refuses elsewhere, with no fallback)."""
    from aiayn.model import cpu
    from aiayn.training import build

    monkeypatch.setattr(cpu, "kernel_dtype", lambda: torch.bfloat16 if request.param else torch.float32)
    monkeypatch.setattr(build, "native_bf16", lambda: request.param)
    monkeypatch.setattr(cpu, "int8_activations", lambda: not request.param)
    return request.param


def tiny(**overrides) -> ModelConfig:
    """A tiny config for fast tests (dropout off unless asked)."""
    return ModelConfig.preset("tiny", **{"vocab_size": 40, "dropout": 0.0, "max_len": 64, **overrides})


def random_ids(batch: int, length: int, vocab: int = 40, low: int = 4) -> torch.Tensor:
    """Ids above the special tokens, so none of them is padding."""
    return torch.randint(low, vocab, (batch, length))


A, B, EOS = 4, 5, 2
SCRIPT = {  # prefix (after BOS) -> next-token probabilities; anything else has probability 0
    (): {A: 0.6, B: 0.4},
    (A,): {EOS: 0.4, A: 0.1, B: 0.5},
    (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    (A, B): {EOS: 1.0}, (A, A): {EOS: 1.0}, (B, A): {EOS: 1.0}, (B, B): {EOS: 1.0},
}


class ScriptedModel(EncoderDecoder):
    """An encoder-decoder whose next-token distribution is read from SCRIPT (fairseq-style test model)."""

    def __init__(self) -> None:
        super().__init__(tiny(vocab_size=8))

    def encode(self, src_ids: Tensor, need_weights: bool = False) -> Tensor:
        return torch.zeros(src_ids.size(0), src_ids.size(1), 1)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_mask=None, cache=None, output=None, left_pad=None,
               last=False) -> Tensor:
        assert cache is None and output is None, "use_cache=False, no shortlist: the script needs whole prefixes"
        assert left_pad is None, "the script's rows all start at BOS"
        logits = torch.full((tgt_ids.size(0), tgt_ids.size(1), 8), float("-inf"))
        for row, ids in enumerate(tgt_ids.tolist()):
            for tok, p in SCRIPT.get(tuple(ids[1:]), {EOS: 1.0}).items():
                logits[row, -1, tok] = math.log(p)
        return logits[:, -1:] if last else logits



CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT_TEXTS = ["Translate to English: Ein Mann fährt ein Pferd.", "A man rides a horse.", "Zwei Hunde spielen.",
              "Two dogs play.", "What is the capital of France?", "Paris is the capital of France."]


def greedy_steps(model, prompts: Tensor, steps: int, capacity: int | None = None,
                 poison: bool = False) -> tuple[list[Tensor], object]:
    """``steps`` greedy tokens after ``prompts`` through ``model.step``: each step's logits and the last state.
    ``capacity``: the cache's columns (default: just enough); ``poison``: its slots from ``model/static.py``'s
    ``SPAN`` on hold NaN from the second step on (once the static step has zeroed the unwritten slots: slots no step
    of a short text may read)."""
    from aiayn.model.static import SPAN

    tokens, state = model.start(prompts, steps + 1 if capacity is None else capacity - prompts.size(1))
    out = []
    with torch.no_grad():
        logits = model.step(tokens, state, last=True)
        for step in range(steps):
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            logits = model.step(tokens, state, last=True)
            out.append(logits)
            for layer in state.cache.layers if poison and step == 0 else []:
                layer.self_kv.k[:, :, SPAN:] = float("nan")
                layer.self_kv.v[:, :, SPAN:] = float("nan")
    return out, state


def chat_checkpoint(folder: Path, max_len: int = 256, seed: int = 0, template: bool | str = True) -> Path:
    """A tiny random decoder-only checkpoint with a byte-level BPE, ChatML special tokens and a chat template (as an
    imported instruct model has; ``template``: ChatML, or this template's text): ``<|im_end|>`` is its EOS, a
    padding row appended."""
    import json

    from tokenizers import ByteLevelBPETokenizer

    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.decoder_only import DecoderOnly
    from aiayn.tokenizers.hf import HFTokenizers

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CHAT_TEXTS * 5, vocab_size=320, show_progress=False,
                            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    settings = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    settings.update({"chat_template": template if isinstance(template, str) else CHATML} if template else {})
    tokenizers = HFTokenizers(bpe._tokenizer.to_str(), json.dumps(settings))
    vocab = len(tokenizers.src)
    cfg = ModelConfig.preset("tiny", arch="decoder-only", vocab_size=vocab + 1, n_encoder_layers=0, dropout=0.0,
                             norm="pre", positions="rope", max_len=max_len, share_embeddings="all", pad_id=vocab,
                             bos_id=vocab, unk_id=vocab, mask_id=vocab, padding_row=True,
                             eos_id=tokenizers.src.token_id("<|im_end|>"))
    torch.manual_seed(seed)
    write_checkpoint(folder, DecoderOnly(cfg).eval(), tokenizers)
    return folder


QWEN = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "qwen2.5"


def page_of_text() -> str:
    """A page of English (the first 40 Multi30K validation captions, about 2,500 characters): a long system
    prompt, over ``--max-chars``' 1,000 characters."""
    import gzip

    with gzip.open(QWEN.parents[1] / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        return "Describe pictures like these:\n" + "\n".join(f.read().splitlines()[:40])


def qwen_checkpoint(folder: Path, max_len: int = 1024, flat: bool = False) -> Path:
    """A tiny random model with Qwen2.5's real tokenizer and chat template: ``<tool_call>`` and ``</tool_call>``
    are added tokens of its vocabulary, as the released model has them; ``max_len``: its context; ``flat``: its
    final norm zeroed, so every score is 0 and a ``logit_bias`` alone says what it writes."""
    import gzip
    import shutil

    import torch

    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.config import ModelConfig
    from aiayn.model.decoder_only import DecoderOnly
    from aiayn.tokenizers.hf import HFTokenizers

    tok_folder = folder.parent / "qwen-tokenizer"
    tok_folder.mkdir()
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        shutil.copy(QWEN / name, tok_folder / name)
    (tok_folder / "tokenizer.json").write_bytes(gzip.decompress((QWEN / "tokenizer.json.gz").read_bytes()))
    tokenizers = HFTokenizers.load(tok_folder)
    end, pad = tokenizers.src.token_id("<|im_end|>"), tokenizers.src.token_id("<|endoftext|>")
    cfg = ModelConfig.preset("tiny", arch="decoder-only", vocab_size=len(tokenizers.src), n_encoder_layers=0,
                             d_model=32, n_heads=2, d_ff=64, dropout=0.0, norm="pre", positions="rope", max_len=max_len,
                             pad_id=pad, bos_id=pad, unk_id=pad, mask_id=pad, eos_id=end)
    torch.manual_seed(0)
    model = DecoderOnly(cfg).eval()
    if flat:
        torch.nn.init.zeros_(model.decoder.norm.weight)
        torch.nn.init.zeros_(model.decoder.norm.bias)
    write_checkpoint(folder, model, tokenizers)
    return folder


@pytest.fixture(scope="session")
def model() -> EncoderDecoder:
    """A tiny random encoder-decoder in float64 (vocabulary 30) for decoding tests."""
    torch.manual_seed(3)
    return EncoderDecoder(tiny(vocab_size=30)).double().eval()


def train_reverse(cfg: ModelConfig, steps: int) -> EncoderDecoder:
    """A small encoder-decoder trained on the reverse task, in float64 for exact comparisons."""
    from aiayn.data.synthetic import copy_batch
    from aiayn.training.objective import label_smoothed_cross_entropy, make_optimizer, shift_target

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    m = EncoderDecoder(cfg)
    opt = make_optimizer(m, lr=3e-3)
    for _ in range(steps):
        src, tgt = copy_batch(cfg, 32, gen, reverse=True)
        tgt_in, labels = shift_target(tgt, 0, 2)
        loss = label_smoothed_cross_entropy(m(src, tgt_in), labels, 0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval().double()


def trained_once(tmp_path_factory, name: str, train: Callable[[Path], None]) -> Path:
    """The folder ``train`` fills, made once per test session: the first xdist worker to ask trains it while the
    other waits on the lock, then both read it (pytest-xdist's recipe for a session fixture made once). The tests
    only read these runs."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this session's folder, above each worker's own
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with FileLock(f"{folder}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed midway left it half made
            folder.mkdir()
            train(folder)
            done.touch()
    return folder


REVERSE_RUNS = {  # the tiny runs on the reverse task the CLI trains for the tests (benchmarks/bench_learning_spread.py
    "reverse": ("--max-steps", "300", "--eval-every", "100"),  # measures their spread, as the tests judge them)
    "cmlm": ("--task", "cmlm", "--max-steps", "400", "--eval-every", "400"),
    "ctc": ("--task", "ctc", "--glance", "0.5", "--max-steps", "300", "--eval-every", "300"),
}


def train_reverse_run(folder: Path, name: str, *flags: str) -> Path:
    """``aiayn train`` of ``REVERSE_RUNS[name]`` (and ``flags``) into ``folder/run``, in this process."""
    result = run_main("train", "--data", "reverse", "--preset", "tiny", "--output", str(folder / "run"),
                      "--vocab-size", "300", "--max-tokens", "1024", "--schedule", "inverse_sqrt", "--lr", "0.003",
                      "--warmup", "50", *REVERSE_RUNS[name], *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    return folder / "run"


def reversed_share(texts: list[str], outs: list[str]) -> float:
    """The share of the words of ``texts`` that ``outs`` (their translations) put in reverse order, in place."""
    right = sum(a == b for text, out in zip(texts, outs, strict=True)
                for a, b in zip(out.split(), reversed(text.split()), strict=False))
    return right / sum(len(text.split()) for text in texts)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A tiny model trained on the reverse task by the CLI (shared by the CLI, visual and server tests)."""
    return trained_once(tmp_path_factory, "reverse", lambda folder: train_reverse_run(folder, "reverse")) / "run"


@pytest.fixture(scope="session")
def cmlm_run(tmp_path_factory) -> Path:
    """A tiny conditional masked LM (Mask-Predict) trained on the reverse task by the CLI."""
    return trained_once(tmp_path_factory, "cmlm", lambda folder: train_reverse_run(folder, "cmlm")) / "run"


@pytest.fixture(scope="session")
def ctc_run(tmp_path_factory) -> Path:
    """A tiny CTC model trained on the reverse task by the CLI, with glancing."""
    return trained_once(tmp_path_factory, "ctc", lambda folder: train_reverse_run(folder, "ctc")) / "run"


PLANTED = "".join(f"the cat sat on the mat . a dog ran in the park {i % 5} .\n" for i in range(300))


def train_family(folder: Path, task: str, text: str = PLANTED, **changes) -> Path:
    """A tiny model of the family (``task`` lm or mlm) trained on ``text`` into ``folder/run``, in this process."""
    from aiayn.training.config import TrainConfig
    from aiayn.training.trainer import Trainer

    (folder / "text.txt").write_text(text)
    recipe = {"data": str(folder / "text.txt"), "task": task, "preset": "tiny", "output": str(folder / "run"),
              "block_size": 32, "max_tokens": 512, "max_steps": 150, "eval_every": 150,
              "schedule": "inverse_sqrt", "lr": 3e-3, "warmup": 20, "keep_last": 0, "log_every": 50,
              "label_smoothing": 0.0, "model": {"dropout": 0.0, "norm": "pre"}, "device": "cpu", **changes}
    Trainer(TrainConfig(**recipe)).train()
    return folder / "run"


def train_mlm(folder: Path, **changes) -> Path:
    """The masked language model of ``mlm_run`` (its recipe, ``changes`` over it) trained into ``folder/run``."""
    import random

    sentences = ["the cat sat on the mat .", "a dog ran in the park .", "the bird flew over a house .",
                 "my friend read a book ."]
    rng = random.Random(0)  # shuffled, so a token's place in a block says nothing: only the context does
    text = "".join(rng.choice(sentences) + "\n" for _ in range(800))
    return train_family(folder, "mlm", text, vocab_size=400, max_steps=1500, eval_every=1500, **changes)


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory) -> Path:
    """A tiny character-level language model trained on a repeated text (for generate and the server)."""
    return trained_once(tmp_path_factory, "lm", lambda f: train_family(f, "lm", tokenizer_type="char")) / "run"


@pytest.fixture(scope="session")
def mlm_run(tmp_path_factory) -> Path:
    """A tiny masked language model trained on the same text: it learns to fill "sat", "mat", "ran"..."""
    return trained_once(tmp_path_factory, "mlm", train_mlm) / "run"


@contextlib.contextmanager
def serving(app, limits):
    """A real uvicorn server for ``app`` on a free local port (with the server's own guards); yields its URL."""
    import socket
    import threading
    import time

    import uvicorn

    from aiayn.serve.http import server_config

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, limits, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def qwen_served(tmp_path_factory):
    """``aiayn serve`` of a tiny random model with Qwen2.5's tokenizer and chat template, served as "qwen-tiny":
    the server each client library's tests talk to. Yields (its /v1 URL, the generator)."""
    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    generator = TextGenerator.from_checkpoint(qwen_checkpoint(tmp_path_factory.mktemp("qwen") / "ckpt"))
    limits = Limits()  # the default flags: a page-long system prompt must get through them
    with serving(create_app(generator, limits, name="qwen-tiny"), limits) as url:
        yield f"{url}/v1", generator


@pytest.fixture
def rendered_prompts(qwen_served, monkeypatch) -> list[tuple[str, int]]:
    """Every prompt the ``qwen_served`` server renders during the test (its chat template's text) and its count of
    tokens, in order."""
    generator, seen = qwen_served[1], []
    render = generator.rendered_ids

    def spy(prompt, *args, **kwargs):
        ids = render(prompt, *args, **kwargs)
        seen.append((prompt, len(ids)))
        return ids

    monkeypatch.setattr(generator, "rendered_ids", spy)
    return seen


def assert_whole_text_reached(rendered: list[tuple[str, int]], text: str, tokens: int) -> None:
    """One of the prompts the server rendered holds all of ``text`` (nothing cut), and the client was told it used
    that prompt's ``tokens``."""
    assert any(text in prompt and count == tokens for prompt, count in rendered), (tokens, [c for _, c in rendered])


def run_client_snippet(name: str, url: str, model: str) -> dict:
    """Run docs/serving.md's snippet for the client library ``name`` (``<!-- client:NAME -->``) as it is written,
    against ``url`` (a /v1 address) and ``model``; its variables."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    code = doc.split(f"<!-- client:{name} -->\n```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("http://127.0.0.1:8000/v1", url).replace('"MODEL"', f'"{model}"')
    code = code.replace("http://127.0.0.1:8000", url.removesuffix("/v1"))  # a client that adds /v1 itself
    import sys
    import types

    module = types.ModuleType(f"docs_{name.replace('-', '_')}")  # a module, so pydantic finds its classes' names
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, f"docs/serving.md ({name})", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


@pytest.fixture(scope="session")
def live_server(trained_run):
    """A real uvicorn server on a free local port, serving the trained tiny model; yields (url, app)."""
    from aiayn.inference.translator import Translator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    limits = Limits(max_chars=200, max_texts=8, read_timeout_s=1.0, max_connections=40)
    app = create_app(Translator.from_checkpoint(trained_run, beam_size=2), limits, max_batch=32, wait_ms=50)
    with serving(app, limits) as url:
        yield url, app


def png_pixels(path: Path, inches: tuple[float, float], dpi: int = 110):
    """The PNG a figure was saved to (``visual/figures.save_figure``'s dpi), as (H, W, 3) floats in 0..1, checked
    to be a figure of ``inches`` (width, height) with something drawn on it (not one colour)."""
    from matplotlib.image import imread

    pixels = imread(path)[..., :3]
    height, width = pixels.shape[:2]  # matplotlib rounds a size in inches times the dpi either way
    assert abs(height - inches[1] * dpi) <= 1 and abs(width - inches[0] * dpi) <= 1, (pixels.shape, inches)
    assert pixels.reshape(-1, 3).std(axis=0).max() > 0.1, "a blank picture"
    return pixels


def red_pixels(pixels) -> int:
    """How many pixels are pure red (the frames the refinement pictures draw around predicted or kept tokens)."""
    return int(((pixels[..., 0] > 0.9) & (pixels[..., 1] < 0.1) & (pixels[..., 2] < 0.1)).sum())


def run_main(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """``aiayn ARGS`` run in this process by ``aiayn.cli.main``, as a finished process (its return code, stdout and
    stderr): no interpreter to start, which costs seconds under load. For what a command does, not for the
    process itself (signals, exit on a crash, a restart under jemalloc: ``aiayn train`` runs as a process)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout
    from unittest import mock

    from aiayn.cli import main

    out, err = io.StringIO(), io.StringIO()
    given = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")  # with .buffer, as sys.stdin has
    with mock.patch("sys.stdin", given), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's own refusals
            code = exit.code
    return subprocess.CompletedProcess(["aiayn", *args], code, out.getvalue(), err.getvalue())


def parses(command: str) -> None:
    """``aiayn ARGS`` (or ``torchrun ... -m aiayn ARGS``) parsed by aiayn's parser as written; argparse exits on a
    mistake (README's commands and the --help examples are held to it)."""
    import shlex

    from aiayn.cli.main import build_parser

    words = shlex.split(command)
    build_parser("test").parse_args(words[words.index("aiayn") + 1:])


def wait_until_serving(url: str, proc, seconds: float = 60.0) -> None:
    """Wait until ``url``'s /health answers 200; the server process ``proc`` ending first fails with its stderr."""
    import time

    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
    raise AssertionError(f"{url} did not answer /health within {seconds:g} s")
