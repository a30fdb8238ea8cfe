"""Decoding throughput: generated tokens/s of aiayn against Hugging Face generate() and CTranslate2.

Random weights, source length 20, exactly 32 new tokens per sentence (EOS forbidden until then, so every
engine does the same work), greedy at batch 1 and 16, beam 4 at batch 16; aiayn with the KV cache on and
off, float32 and int8 (``aiayn.quantize``). The same dimensions run as a Hugging Face ``MarianMTModel``
(``generate()``, cache on and off, float32) and, with aiayn's own weights exported, in CTranslate2
(float32 and int8, ``intra_threads`` = torch's thread count). ``transformers`` and ``ctranslate2`` are
benchmark-only dependencies (``pip install -e '.[bench]'``); an engine that is not installed is skipped.
Prints JSON lines {"config", "metric", "value", "unit"}; compare the ``speedup_*`` ratios (same run).

    python benchmarks/bench_decode.py [--presets small base] [--engines aiayn hf ct2] [--min-seconds 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from aiayn import EncoderDecoder, ModelConfig, generate, quantize

SRC_LEN, NEW_TOKENS, BEAM, VOCAB = 20, 32, 4, 8000
CASES = [("greedy", 1), ("greedy", 16), ("beam", 16)]


def emit(config: str, metric: str, value: float, unit: str) -> None:
    print(json.dumps({"config": config, "metric": metric, "value": round(value, 3), "unit": unit}), flush=True)


def seconds_per_call(fn: Callable[[], object], min_seconds: float, min_runs: int = 2) -> float:
    """Mean wall time of ``fn`` after one warm-up call, over at least ``min_runs`` and ``min_seconds``."""
    fn()
    runs, start = 0, time.perf_counter()
    while runs < min_runs or time.perf_counter() - start < min_seconds:
        fn()
        runs += 1
    return (time.perf_counter() - start) / runs


def check_lengths(lengths: list[int], engine: str) -> None:
    """Every engine must produce exactly NEW_TOKENS per sentence, or the comparison is void."""
    if any(n != NEW_TOKENS for n in lengths):
        raise SystemExit(f"{engine}: produced {sorted(set(lengths))} new tokens, expected {NEW_TOKENS}")


def aiayn_runner(model, src: torch.Tensor, strategy: str, cache: bool) -> Callable[[], object]:
    def run():
        out = generate(model, src, strategy, beam_size=BEAM, max_new_tokens=NEW_TOKENS,
                       min_new_tokens=NEW_TOKENS, use_cache=cache)
        check_lengths([len(row) for row in out], "aiayn")
    return run


def hf_model(cfg: ModelConfig):
    """A MarianMTModel with the preset's dimensions (post-norm, ReLU, scaled embeddings, tied)."""
    from transformers import MarianConfig, MarianMTModel

    hf = MarianConfig(vocab_size=cfg.vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
                      decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads,
                      decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
                      activation_function="relu", scale_embedding=True, max_position_embeddings=512,
                      pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.bos_id,
                      forced_eos_token_id=None)
    return MarianMTModel(hf).eval()


def hf_runner(model, src: torch.Tensor, strategy: str, cache: bool) -> Callable[[], object]:
    def run():
        with torch.no_grad():
            out = model.generate(input_ids=src, attention_mask=torch.ones_like(src), do_sample=False,
                                 num_beams=BEAM if strategy == "beam" else 1, max_new_tokens=NEW_TOKENS,
                                 min_new_tokens=NEW_TOKENS, use_cache=cache)
        check_lengths([out.size(1) - 1] * out.size(0), "transformers")  # minus the start token
    return run


def ct2_translator(model: EncoderDecoder, folder: Path, compute_type: str):
    import ctranslate2
    from ct2_export import AiaynConverter

    if not folder.exists():
        AiaynConverter(model).convert(str(folder))
    return ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type,
                                  intra_threads=torch.get_num_threads())


def ct2_runner(translator, src: torch.Tensor, strategy: str) -> Callable[[], object]:
    from ct2_export import vocabulary

    vocab = vocabulary(VOCAB)
    tokens = [[vocab[i] for i in row] for row in src.tolist()]

    def run():
        results = translator.translate_batch(tokens, beam_size=BEAM if strategy == "beam" else 1,
                                             max_decoding_length=NEW_TOKENS, min_decoding_length=NEW_TOKENS)
        check_lengths([len(r.hypotheses[0]) for r in results], "ctranslate2")
    return run


def measure(name: str, runner: Callable[[], object], batch: int, min_seconds: float) -> float:
    rate = batch * NEW_TOKENS / seconds_per_call(runner, min_seconds)
    emit(name, "generated_tokens_per_s", rate, "tokens/s")
    return rate


def bench_preset(preset: str, engines: list[str], min_seconds: float, workdir: Path) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset, vocab_size=VOCAB)
    models = {"fp32": EncoderDecoder(cfg).eval()}
    models["int8"] = quantize(models["fp32"])
    hf = hf_model(cfg) if "hf" in engines else None
    ct2 = {p: ct2_translator(models["fp32"], workdir / preset, t)
           for p, t in (("fp32", "float32"), ("int8", "int8"))} if "ct2" in engines else {}
    for strategy, batch in CASES:
        src = torch.randint(5, VOCAB, (batch, SRC_LEN))
        case = f"{preset}/{strategy}{BEAM if strategy == 'beam' else ''}/b{batch}"
        for precision in ("fp32", "int8"):
            for cache in (True, False):
                tag = f"{case}/{'cache' if cache else 'nocache'}/{precision}"
                ours = measure(f"{tag}/aiayn", aiayn_runner(models[precision], src, strategy, cache), batch,
                               min_seconds)
                if hf is not None and precision == "fp32":
                    theirs = measure(f"{tag}/hf", hf_runner(hf, src, strategy, cache), batch, min_seconds)
                    emit(tag, "speedup_vs_hf_generate", ours / theirs, "x")
                if precision in ct2 and cache:
                    theirs = measure(f"{tag}/ct2", ct2_runner(ct2[precision], src, strategy), batch, min_seconds)
                    emit(tag, "speedup_vs_ctranslate2", ours / theirs, "x")


def available(engines: list[str]) -> list[str]:
    modules = {"aiayn": "aiayn", "hf": "transformers", "ct2": "ctranslate2"}
    found = [e for e in engines if importlib.util.find_spec(modules[e]) is not None]
    for engine in sorted(set(engines) - set(found)):
        print(f"skipping {engine}: {modules[engine]} is not installed (pip install -e '.[bench]')", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--engines", nargs="+", default=["aiayn", "hf", "ct2"], choices=["aiayn", "hf", "ct2"])
    parser.add_argument("--min-seconds", type=float, default=1.0, help="time each measurement at least this long")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))  # ct2_export
    engines = available(args.engines)
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            bench_preset(preset, engines, args.min_seconds, Path(tmp))


if __name__ == "__main__":
    main()
