"""The language-model presets of ``bench_engines.py``: batch-1 decoding on a CPU, aiayn against transformers,
CTranslate2 and llama.cpp (``llama-cpp-python``, where installed) on the very same weights: a real model
(``smollm2``: SmolLM2-135M-Instruct from its GGUF file; ``gemma3``: Gemma 3 270M from its Q4_K_M GGUF file), a
random model of Qwen2.5-0.5B's shape (``qwen-shape``: d 896, 24 layers, 14 query / 2 key-value heads, SwiGLU 4864,
vocabulary 151,936, tied), of Qwen3-0.6B's (``qwen3-shape``), of Qwen3-30B-A3B's cut to 2 of its 48 layers
(``qwen3-moe-shape``: 128 experts, 8 a token) or a random Llama (``llama``: d 512, 6 layers, 8 query / 2 key-value
heads, SwiGLU 1408, vocabulary 32,000): ``SHAPES``.

The model is imported with ``aiayn import``, exported with ``aiayn export --format hf`` for transformers and
CTranslate2 (its own converter) and with ``aiayn export --format gguf`` (F32, BF16, Q8_0, Q4_0) for llama.cpp.
Each engine and precision runs in its own process, one after the other, with the machine's threads:

- ``decode``: new tokens/s after a short prompt, greedy, the new tokens alone (the time of N new tokens minus the
  time of 1, over N - 1; each time the best of three runs after a warm-up), at batch 1 and 8 (llama.cpp's Python
  binding: batch 1);
- ``prefill``: tokens/s of a 512-token prompt at batch 1 (the time to a chat's first token);
- ``peak_rss``: the worker process's largest resident set (``VmHWM``);
- ``same_tokens``: whether the first row's greedy tokens equal aiayn's float32 ones;
- ``bandwidth``: the machine's memory bandwidth (a 1 GiB ``torch`` copy, read + write), and the fraction of it
  that batch-1 decoding reaches (the weights one token reads: every matrix, the output projection included).

Precisions: fp32 (llama.cpp F32), bf16 (BF16), int8 (aiayn: weight-only int8, ``--int8``; transformers: torch's
dynamic int8 linear layers; CTranslate2 int8_float32; llama.cpp Q8_0), int4 (aiayn: weight-only int4 in groups of
32, ``--int4``; llama.cpp Q4_0).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
from common import best_of, run_worker
from common import emit as print_figure

PROMPT = "Once upon a time"
PRECISIONS = {"aiayn": ("fp32", "bf16", "int8", "int4"), "aiayn-compiled": ("fp32", "bf16", "int8", "int4"),
              "hf": ("fp32", "bf16", "int8"),
              "ct2": ("fp32", "bf16", "int8"), "llama.cpp": ("fp32", "bf16", "int8", "int4")}
GGUF_TYPES = {"fp32": "f32", "bf16": "bf16", "int8": "q8_0", "int4": "q4_0"}
PRESETS = ("smollm2", "gemma3", "qwen-shape", "llama", "qwen3-shape", "qwen3-moe-shape")

emit = partial(print_figure, digits=None)


def aiayn(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "aiayn", *args], check=True, stdout=subprocess.DEVNULL)


def prepare(model: str, gguf: str | None, work: Path, engines: list[str], precisions: list[str]) -> None:
    """work/aiayn (the checkpoint), work/hf (for transformers and CTranslate2), work/ct2, work/*.gguf."""
    if model in ("smollm2", "gemma3"):  # a real model's GGUF file
        aiayn("import", gguf, "--output", str(work / "aiayn"))
        aiayn("export", "--checkpoint", str(work / "aiayn"), "--format", "hf", "--output", str(work / "hf"))
    else:
        random_shape(model, work / "hf")
        aiayn("import", str(work / "hf"), "--output", str(work / "aiayn"))
    if "ct2" in engines:
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(work / "hf")).convert(str(work / "ct2"))
    if "llama.cpp" in engines:
        for kind in (GGUF_TYPES[p] for p in precisions):
            aiayn("export", "--checkpoint", str(work / "aiayn"), "--format", "gguf", "--quantization", kind,
                  "--output", str(work / f"{kind}.gguf"))


def _byte_bpe():
    """A small byte-level BPE tokenizer (transformers' GPT2TokenizerFast), trained on the prompts."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([PROMPT, "The quick brown fox jumps over the lazy dog."] * 50, vocab_size=400,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>")


SHAPES = {  # random models of these shapes, with a small byte-level BPE (the rows past it unused)
    "qwen-shape": dict(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                       num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                       max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1e6),
    "llama": dict(model_type="llama", vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024),
    "qwen3-shape": dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,  # 0.6B
                        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                        max_position_embeddings=40960, tie_word_embeddings=True, rope_theta=1e6),
    "qwen3-moe-shape": dict(model_type="qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                            num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                            num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                            max_position_embeddings=40960, tie_word_embeddings=False, rope_theta=1e6),
}  # qwen3-moe-shape: Qwen3-30B-A3B's layers, 2 of its 48 (fitting this machine's memory in float32)


def random_shape(model: str, folder: Path) -> None:
    """A random transformers model of ``SHAPES[model]``, saved with the byte-level BPE in ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = _byte_bpe()
    fields = dict(SHAPES[model])
    torch.manual_seed(0)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields, eos_token_id=tok.eos_token_id, bos_token_id=None)
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    tok.save_pretrained(folder)


def prompt_ids(work: Path) -> tuple[list[int], list[int]]:
    """(the short prompt's ids, a 512-token prompt) in the model's own tokenizer."""
    from aiayn.tokenizers import load_tokenizers

    tokenizer = load_tokenizers(work / "aiayn").src
    short = tokenizer.encode(PROMPT)
    long = (tokenizer.encode(" ".join(["The quick brown fox jumps over the lazy dog."] * 60)) * 2)[:512]
    return short, long


REPEATS = 3  # each timing the best of three (one shared VM's runs of one engine varied by up to 20%)


def timed(run, *args) -> float:
    run(*args)  # warm-up
    return best_of(REPEATS, lambda: run(*args))


def worker(engine: str, precision: str, work: Path, new_tokens: int) -> None:
    """One engine at one precision: prints its figures as one JSON line."""
    short, long = prompt_ids(work)
    make = {"aiayn": aiayn_engine, "aiayn-compiled": partial(aiayn_engine, compiled=True), "hf": hf_engine,
            "ct2": ct2_engine, "llama.cpp": llama_cpp_engine}[engine]
    start = time.perf_counter()
    generate, batches = make(precision, work)
    out = {"decode": {}, "ready_s": time.perf_counter() - start}
    # as the products decode (aiayn's engine: no_grad): a graph compiled at start-up serves their tensors
    with torch.no_grad() if engine == "aiayn-compiled" else torch.inference_mode():
        for batch in batches:
            rows = [short] * batch
            many, one = timed(generate, rows, new_tokens), timed(generate, rows, 1)
            out["decode"][batch] = batch * (new_tokens - 1) / (many - one)
        out["prefill"] = len(long) / timed(generate, [long], 1)
        out["tokens"] = generate([short], new_tokens)[0]
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


def peak_rss_mb() -> float:
    """This process's largest resident set (VmHWM: its own address space; ``ru_maxrss`` would carry the parent's
    over ``exec``)."""
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def aiayn_engine(precision: str, work: Path, compiled: bool = False):
    """aiayn's model at ``precision``; ``compiled``: its decoding step compiled (``--compile on``: batch 1 alone;
    Inductor's caches where ``aiayn chat`` keeps them, so a second run's start is warm)."""
    from aiayn import generate
    from aiayn.data.batching import pad_batch
    from aiayn.inference.compiled import attach
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import converter, inference_copy

    options = {"int8": precision == "int8", "bf16": precision == "bf16", "int4": precision == "int4",
               "few_rows": True}  # as a language model's products convert it
    model, _ = load_checkpoint(work / "aiayn", convert=converter(**options))  # converted as read, as products do
    model = inference_copy(model.eval(), own=True, **options)
    if compiled and not attach(model, "on"):  # its lines on standard error
        raise RuntimeError("the decoding step did not compile")

    def run(rows: list[list[int]], n: int) -> list[list[int]]:
        ids = pad_batch(rows, model.config.pad_id)
        return generate(model, ids, "greedy", max_new_tokens=n, min_new_tokens=n)
    return run, ((1,) if compiled else (1, 8))


def hf_engine(precision: str, work: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(work / "hf", dtype=torch.float32).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    if precision == "int8":
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    def run(rows: list[list[int]], n: int) -> list[list[int]]:
        ids = torch.tensor(rows)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
        return out[:, ids.size(1):].tolist()
    return run, (1, 8)


def ct2_engine(precision: str, work: Path):
    import ctranslate2

    compute = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8_float32"}[precision]
    generator = ctranslate2.Generator(str(work / "ct2"), compute_type=compute, intra_threads=torch.get_num_threads())
    from aiayn.tokenizers import load_tokenizers

    tokenizer = load_tokenizers(work / "aiayn").src

    def run(rows: list[list[int]], n: int) -> list[list[int]]:
        results = generator.generate_batch([tokenizer.pieces(r) for r in rows], max_length=n, min_length=n,
                                           sampling_topk=1, include_prompt_in_result=False)
        return [r.sequences_ids[0] for r in results]
    return run, (1, 8)


def llama_cpp_engine(precision: str, work: Path):
    from llama_cpp import Llama

    llm = Llama(model_path=str(work / f"{GGUF_TYPES[precision]}.gguf"), n_ctx=1024, n_batch=512,
                n_threads=torch.get_num_threads(), verbose=False)

    def run(rows: list[list[int]], n: int) -> list[list[int]]:
        llm.reset()
        out = []
        for token in llm.generate(rows[0], temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
            out.append(token)
            if len(out) == n:
                break
        return [out]
    return run, (1,)


def memory_bandwidth() -> float:
    """GB/s of a 1 GiB float32 copy (bytes read + written), the best of five (a shared machine's varies)."""
    src = torch.ones(1 << 28)
    dst = torch.empty_like(src)
    best = min(timed(dst.copy_, src) for _ in range(5))
    return 2 * src.numel() * 4 / best / 1e9


def bytes_per_token(work: Path, precision: str) -> float:
    """The weight bytes one batch-1 token reads: every matrix (the tied output projection once), at the precision."""
    from aiayn.inference.load import load_checkpoint

    model, _ = load_checkpoint(work / "aiayn")
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)  # the token table is the output (tied)
    return matrices * {"fp32": 4, "bf16": 2, "int8": 1, "int4": 0.5}[precision]


def run_all(args, work: Path) -> None:
    results = run_engines(args, work)
    bandwidth = max(args.bandwidth, memory_bandwidth())  # before and after the engines: the higher
    emit("machine", "memory_bandwidth_after", round(bandwidth, 2), "GB/s (the higher of the two)")
    for (engine, precision), r in results.items():
        emit(f"{args.model}/{engine}/{precision}/batch1", "bandwidth_fraction",
             round(r["decode"]["1"] * bytes_per_token(work, precision) / 1e9 / bandwidth, 3), "of memory bandwidth")


def run_engines(args, work: Path) -> dict:
    """Every engine at every precision, each in its own process: their figures, by (engine, precision). With
    ``args.repeats`` the engines of a precision take that many turns one after another (a shared VM's speed drifts
    over minutes: side by side, a ratio is of like moments); each figure is the best of its turns (the fastest
    decode and prefill, the soonest ready, the lowest peak: a later turn of a compiled engine loads its kept graph)."""
    results = {}
    for precision in args.precisions:
        engines = [e for e in args.engines if precision in PRECISIONS[e]]
        for _ in range(getattr(args, "repeats", 1)):
            for engine in engines:
                lines, error = run_worker(args.script, "lm", engine, precision, str(work), str(args.new_tokens))
                if error:
                    emit(f"{args.model}/{engine}/{precision}", "error", 1, error)
                    continue
                turn = json.loads(lines[-1])
                kept = results.setdefault((engine, precision), turn)
                kept["decode"] = {b: max(rate, turn["decode"][b]) for b, rate in kept["decode"].items()}
                kept["prefill"] = max(kept["prefill"], turn["prefill"])
                kept["ready_s"], kept["peak_rss_mb"] = (min(kept[k], turn[k]) for k in ("ready_s", "peak_rss_mb"))
        for engine in (e for e in engines if (e, precision) in results):
            _emit_engine(f"{args.model}/{engine}/{precision}", results[engine, precision], results)
        for ours in ("aiayn", "aiayn-compiled"):
            mine = results.get((ours, precision))
            for (engine, p), theirs in results.items():
                if mine and p == precision and not engine.startswith("aiayn"):
                    for batch in set(mine["decode"]) & set(theirs["decode"]):
                        emit(f"{args.model}/{ours}/{precision}/batch{batch}", f"decode_vs_{engine}",
                             round(mine["decode"][batch] / theirs["decode"][batch], 3), "x")
    return results


def _emit_engine(config: str, r: dict, results: dict) -> None:
    """One engine's figures at one precision as JSON lines."""
    for batch, rate in r["decode"].items():
        emit(f"{config}/batch{batch}", "decode", round(rate, 2), "tokens/s")
    emit(config, "prefill_512", round(r["prefill"], 1), "tokens/s")
    emit(config, "peak_rss", round(r["peak_rss_mb"], 1), "MiB")
    emit(config, "ready", round(r["ready_s"], 1), "s (loaded, converted, compiled)")
    emit(config, "same_tokens_as_aiayn_fp32", r["tokens"] == results.get(("aiayn", "fp32"), {}).get("tokens"), "bool")


def run(args, work: Path) -> None:
    """Prepare the preset's model for every engine in ``work``, then measure them all (``args``: model, gguf,
    engines, precisions, new_tokens, script)."""
    emit("machine", "torch_threads", torch.get_num_threads(), "threads")
    args.bandwidth = memory_bandwidth()
    emit("machine", "memory_bandwidth_before", round(args.bandwidth, 2), "GB/s")
    prepare(args.model, args.gguf, work, args.engines, args.precisions)
    run_all(args, work)
