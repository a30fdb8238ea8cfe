"""The LLaMA branch measured: grouped-query attention's KV cache, and an imported Llama model's generation speed
against transformers and CTranslate2 on the very same weights.

1. ``kv``: a decoder-only model with 8 query heads, multi-head (8 key/value heads) against grouped-query (2
   key/value heads) at equal parameters (the GQA model's SwiGLU is wider by what its K/V projections save):
   KV-cache bytes per token, and greedy decoding tokens/s at batch 1 and 16 after a 512-token prompt, both
   with the prompt's prefill (``end_to_end``) and for the new tokens alone (``decode``: the time of N new
   tokens minus the time of 1, over N - 1).
2. ``engines``: a random ``LlamaForCausalLM`` (d 512, 6 layers, 8 heads, 2 key/value heads, SwiGLU 1408,
   vocabulary 32,000) saved by ``transformers``, imported with ``aiayn import`` and converted by CTranslate2's
   own converter; each engine generates exactly ``--new-tokens`` tokens (EOS held off) after a 64-token prompt,
   greedy, at batch 1 and 16, in float32, bfloat16 and int8 (transformers' int8: torch's dynamic quantization
   of its linear layers, as aiayn's; CTranslate2's ``int8_float32``). Each engine and precision runs in its
   own process, one after the other.

Prints JSON lines {"config", "metric", "value", "unit"}; ``speedup_vs_*`` are ratios from the same run.

    python benchmarks/bench_llama.py [--parts kv engines] [--engines aiayn hf ct2] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from common import emit as print_figure

PROMPT_KV, PROMPT_ENGINES, VOCAB = 512, 64, 32000
PRECISIONS = ("fp32", "bf16", "int8")


emit = partial(print_figure, digits=4)


def best_of(fn, repeats: int = 2) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def kv_part(new_tokens: int) -> None:
    from aiayn import DecoderOnly, ModelConfig, count_parameters, generate, pack

    llama = dict(norm="pre", norm_type="rmsnorm", feed_forward="swiglu", activation="silu", positions="rope",
                 rope_layout="halves", qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False,
                 dropout=0.0, arch="decoder-only", vocab_size=8000, d_model=512, n_heads=8, n_encoder_layers=0,
                 n_decoder_layers=4)
    mha = ModelConfig(**llama, d_ff=1365)
    gqa = ModelConfig(**llama, d_ff=1365 + 2 * 512 * 384 // (3 * 512), n_kv_heads=2)  # K/V savings into SwiGLU
    results = {}
    for name, cfg in (("mha-8kv", mha), ("gqa-2kv", gqa)):
        torch.manual_seed(0)
        model = pack(DecoderOnly(cfg).eval())
        emit(name, "parameters", count_parameters(cfg), "parameters")
        per_token = 2 * cfg.n_decoder_layers * cfg.kv_heads * cfg.d_head * 4  # K and V, float32
        emit(name, "kv_cache_bytes_per_token", per_token, "bytes")
        for batch in (1, 16):
            prompt = torch.randint(5, cfg.vocab_size, (batch, PROMPT_KV))

            def run(n: int, model=model, prompt=prompt):
                return generate(model, prompt, "greedy", max_new_tokens=n, min_new_tokens=n)

            with torch.inference_mode():
                full, one = best_of(lambda run=run: run(new_tokens)), best_of(lambda run=run: run(1))
            config = f"{name}/batch{batch}/prompt{PROMPT_KV}"
            results[(name, batch)] = batch * (new_tokens - 1) / (full - one)
            emit(config, "end_to_end_tokens_per_s", batch * new_tokens / full, "tokens/s")
            emit(config, "decode_tokens_per_s", results[(name, batch)], "tokens/s")
            emit(config, "kv_cache_mb", per_token * batch * (PROMPT_KV + new_tokens) / 2**20, "MiB")
    for batch in (1, 16):
        emit(f"gqa-vs-mha/batch{batch}", "decode_speedup", results[("gqa-2kv", batch)] / results[("mha-8kv", batch)],
             "x")


def make_llama(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>") \
        .save_pretrained(folder)


def prompts(batch: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, PROMPT_ENGINES), generator=torch.Generator().manual_seed(batch))


def worker(engine: str, precision: str, folder: Path, new_tokens: int) -> None:
    """One engine at one precision, batch 1 and 16: prints {"batch": tokens/s} as one JSON line."""
    run = {"aiayn": aiayn_runner, "hf": hf_runner, "ct2": ct2_runner}[engine](precision, folder, new_tokens)
    out = {}
    for batch in (1, 16):
        ids = prompts(batch)
        with torch.inference_mode():
            out[batch] = batch * new_tokens / best_of(lambda ids=ids: run(ids))
    print(json.dumps(out))


def aiayn_runner(precision: str, folder: Path, new_tokens: int):
    from aiayn import generate
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import inference_copy

    model, _ = load_checkpoint(folder / "aiayn")
    model = inference_copy(model.eval(), int8=precision == "int8", bf16=precision == "bf16")
    return lambda ids: generate(model, ids, "greedy", max_new_tokens=new_tokens, min_new_tokens=new_tokens)


def hf_runner(precision: str, folder: Path, new_tokens: int):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder / "hf", dtype=torch.float32).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    if precision == "int8":
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    return lambda ids: model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)


def ct2_runner(precision: str, folder: Path, new_tokens: int):
    import ctranslate2

    compute = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8_float32"}[precision]
    generator = ctranslate2.Generator(str(folder / "ct2"), compute_type=compute, intra_threads=torch.get_num_threads())

    def run(ids: torch.Tensor):
        tokens = [[f"w{i}" for i in row] for row in ids.tolist()]
        return generator.generate_batch(tokens, max_length=new_tokens, min_length=new_tokens, sampling_topk=1,
                                        include_prompt_in_result=False)
    return run


def engines_part(engines: list[str], new_tokens: int) -> None:
    from aiayn.interop import import_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_llama(folder / "hf")
        import_pretrained(folder / "hf", folder / "aiayn")
        if "ct2" in engines:
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(str(folder / "hf")).convert(str(folder / "ct2"))
        rates = {}
        for precision in PRECISIONS:
            for engine in engines:
                cmd = [sys.executable, __file__, "--worker", engine, precision, str(folder), str(new_tokens)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode:
                    emit(f"{engine}/{precision}", "error", 1, done.stderr.strip().splitlines()[-1][:200])
                    continue
                rates[(engine, precision)] = {int(k): v for k, v in json.loads(done.stdout.splitlines()[-1]).items()}
                for batch, rate in rates[(engine, precision)].items():
                    emit(f"{engine}/{precision}/batch{batch}/new{new_tokens}", "tokens_per_s", rate, "tokens/s")
            for other in engines[1:]:
                for batch in (1, 16):
                    if ("aiayn", precision) in rates and (other, precision) in rates:
                        ratio = rates[("aiayn", precision)][batch] / rates[(other, precision)][batch]
                        emit(f"aiayn/{precision}/batch{batch}", f"speedup_vs_{other}", ratio, "x")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, engine, precision, folder, new_tokens = sys.argv
        worker(engine, precision, Path(folder), int(new_tokens))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["kv", "engines"], choices=["kv", "engines"])
    parser.add_argument("--engines", nargs="+", default=["aiayn", "hf", "ct2"], choices=["aiayn", "hf", "ct2"])
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    emit("machine", "torch_threads", torch.get_num_threads(), "threads")
    if "kv" in args.parts:
        kv_part(args.new_tokens)
    if "engines" in args.parts:
        engines_part(["aiayn", *[e for e in args.engines if e != "aiayn"]], args.new_tokens)


if __name__ == "__main__":
    main()
