"""The translation presets of ``bench_engines.py``: aiayn against Hugging Face ``generate()`` and CTranslate2 on an
encoder-decoder of the same weights.

Random weights, source length 20, exactly 32 new tokens per sentence (EOS forbidden until then, so every
engine does the same work), greedy at batch 1 and 16, beam 4 at batch 16; aiayn as ``Translator`` runs it on a
CPU (linear layers prepacked for oneDNN, ``aiayn.pack``) with the KV cache on and off, float32 and int8
(``aiayn.quantize``), bfloat16 with the cache, and float32 with plain ``nn.Linear`` for reference. The same
dimensions run as a Hugging Face ``MarianMTModel`` (``generate()``, cache on and off, float32; bfloat16 with
the cache) and, with aiayn's own weights exported, in CTranslate2 (float32 and int8, the compute types it
offers on a CPU; ``intra_threads`` = torch's thread count). Presets ``small`` and ``base`` (aiayn's sizes, a
Marian model of them) and ``opus-mt``: an OPUS-MT-shaped Marian model (d 512, 6+6 layers, 8 heads, FFN 2048,
vocabulary 58,101, SiLU, biases, the pad row zero as OPUS-MT's) with random weights, saved by ``transformers``
and brought in with ``aiayn import``; all three engines then run the very same weights (CTranslate2 through its
own Transformers converter). Figures: ``generated_tokens_per_s``, and the ``speedup_*`` ratios of the same run.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import emit, run_worker

from aiayn import EncoderDecoder, ModelConfig, generate, pack, quantize
from aiayn.inference.precision import inference_copy

PRESETS = ("small", "base", "opus-mt")

SRC_LEN, NEW_TOKENS, BEAM, VOCAB = 20, 32, 4, 8000
CASES = [("greedy", 1), ("greedy", 16), ("beam", 16)]




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
                       min_new_tokens=NEW_TOKENS, max_len_b=None, use_cache=cache)  # exactly NEW_TOKENS
        check_lengths([len(row) for row in out], "aiayn")
    return run


OPUS_MT = dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
               decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
               scale_embedding=True, max_position_embeddings=512)


def opus_mt_folder(root: Path) -> Path:
    """root/hf: a random OPUS-MT-shaped Marian folder (tokenizer files included); root/aiayn: its import."""
    import io

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    from aiayn.interop import import_pretrained

    size = OPUS_MT["vocab_size"]
    vocab = {"</s>": 0, "<unk>": 1, **{f"t{i}": i for i in range(2, size - 1)}, "<pad>": size - 1}
    buf = io.BytesIO()  # a small SentencePiece model: the benchmark feeds ids, the files must only exist
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c d e f g"] * 50), model_writer=buf, vocab_size=12,
                                   hard_vocab_limit=False, minloglevel=2)
    (root / "spm").mkdir(parents=True)
    for name in ("source.spm", "target.spm"):
        (root / "spm" / name).write_bytes(buf.getvalue())
    (root / "spm" / "vocab.json").write_text(json.dumps(vocab))
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(**OPUS_MT, pad_token_id=size - 1, eos_token_id=0, forced_eos_token_id=None,
                                       decoder_start_token_id=size - 1)).eval()
    with torch.no_grad():
        model.model.shared.weight[size - 1] = 0  # OPUS-MT's pad row: decoding starts from a zero embedding
    model.save_pretrained(root / "hf")
    spms = [str(root / "spm" / n) for n in ("source.spm", "target.spm", "vocab.json")]
    MarianTokenizer(*spms).save_pretrained(root / "hf")
    import_pretrained(root / "hf", root / "aiayn")
    return root


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


def vocabulary(size: int) -> list[str]:
    """Token strings for a model without a tokenizer: the specials at aiayn's ids, then ``t{id}``."""
    specials = ["<blank>", "<s>", "</s>", "<unk>"]
    return specials + [f"t{i}" for i in range(len(specials), size)]


def ct2_translator(model: EncoderDecoder, folder: Path, compute_type: str):
    import ctranslate2

    from aiayn.interop.ctranslate2 import AiaynConverter

    if not folder.exists():
        tokens = vocabulary(model.config.vocab_size)
        AiaynConverter(model, tokens, tokens, max_len=256).convert(str(folder))
    return ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type,
                                  intra_threads=torch.get_num_threads())


def ct2_runner(translator, src: torch.Tensor, strategy: str) -> Callable[[], object]:
    vocab = vocabulary(max(VOCAB, OPUS_MT["vocab_size"]))  # t{id}: the opus-mt vocabulary's tokens too
    tokens = [[vocab[i] for i in row] for row in src.tolist()]

    def run():
        results = translator.translate_batch(tokens, beam_size=BEAM if strategy == "beam" else 1,
                                             max_decoding_length=NEW_TOKENS, min_decoding_length=NEW_TOKENS)
        check_lengths([len(r.hypotheses[0]) for r in results], "ctranslate2")
    return run


def layers_of(model, src: torch.Tensor) -> str:
    """What a precision of aiayn runs, in words: its linear layers' classes and its logits' dtype (as
    ``Int8Linear/float32``), so that each case's figure is known to time the path it names."""
    from torch import nn

    from aiayn.model.packed import PackedLinear
    from aiayn.model.quantized import Int4Linear, Int8Linear

    kinds = {type(m).__name__ for m in model.modules() if isinstance(m, nn.Linear | PackedLinear | Int8Linear |
                                                                     Int4Linear)}
    with torch.no_grad():
        logits = model(src[:1], src[:1, :2])  # (1, 2, V)
    return f"{'+'.join(sorted(kinds))}/{str(logits.dtype).removeprefix('torch.')}"


def measure(name: str, runner: Callable[[], object], batch: int, min_seconds: float) -> None:
    emit(name, "generated_tokens_per_s", batch * NEW_TOKENS / seconds_per_call(runner, min_seconds), "tokens/s")


def source(batch: int, vocab: int = VOCAB) -> torch.Tensor:
    """The same random source batch in every worker process."""
    return torch.randint(5, vocab - 1, (batch, SRC_LEN), generator=torch.Generator().manual_seed(batch))


def engine_models(engine: str, model: EncoderDecoder, folder: Path, opus: Path | None) -> dict[str, object]:
    """precision -> what the engine runs: our model (and its int8 copy), a Marian model, or CT2 translators."""
    if engine == "aiayn":  # what Translator decodes with on a CPU: oneDNN-prepacked linears (aiayn.pack); bf16
        # packed where the CPU has bfloat16 kernels, elsewhere the plain model cast (inference_copy decides)
        return {"fp32": pack(model), "bf16": inference_copy(model, bf16=True), "int8": quantize(model),
                "fp32-unpacked": model}
    if engine == "hf":
        if opus is None:
            hf = hf_model(model.config)
        else:
            from transformers import MarianMTModel

            hf = MarianMTModel.from_pretrained(opus / "hf").eval()
        return {"fp32": hf, "bf16": copy.deepcopy(hf).to(torch.bfloat16)}
    if opus is not None:  # CTranslate2's own converter for Marian folders
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(opus / "hf")).convert(str(folder))
    return {p: ct2_translator(model, folder, t) for p, t in (("fp32", "float32"), ("int8", "int8"))}


def runner_for(engine: str, runs, src: torch.Tensor, strategy: str, cache: bool) -> Callable[[], object]:
    if engine == "aiayn":
        return aiayn_runner(runs, src, strategy, cache)
    if engine == "hf":
        return hf_runner(runs, src, strategy, cache)
    return ct2_runner(runs, src, strategy)


def worker(engine: str, preset: str, min_seconds: float, opus: Path | None = None) -> None:
    """Measure one engine on one preset (run in its own process: engines' thread pools never meet)."""
    torch.manual_seed(0)
    if opus is not None:
        from aiayn.inference.load import load_checkpoint

        model = load_checkpoint(opus / "aiayn")[0].eval()  # the imported OPUS-MT-shaped model
    else:
        model = EncoderDecoder(ModelConfig.preset(preset, vocab_size=VOCAB)).eval()  # same weights everywhere
    with tempfile.TemporaryDirectory() as tmp:
        models = engine_models(engine, model, Path(tmp) / "ct2", opus)
        for precision, runs in models.items() if engine == "aiayn" else ():
            emit(f"{preset}/{precision}/aiayn", "layers", layers_of(runs, source(1, model.config.vocab_size)), "path")
        for strategy, batch in CASES:
            case = f"{preset}/{strategy}{BEAM if strategy == 'beam' else ''}/b{batch}"
            for precision, runs in models.items():
                no_cache = engine != "ct2" and precision in ("fp32", "int8")  # CTranslate2 always caches
                for cache in (True, False) if no_cache else (True,):
                    tag = f"{case}/{'cache' if cache else 'nocache'}/{precision}/{engine}"
                    src = source(batch, model.config.vocab_size)
                    measure(tag, runner_for(engine, runs, src, strategy, cache), batch, min_seconds)


def ratios(rates: dict[str, float]) -> None:
    """aiayn against HF (same precision and cache) and against CTranslate2 (cache, same precision); aiayn
    bfloat16 also against HF float32 (HF's default) and against aiayn float32."""
    for name, rate in rates.items():
        if not name.endswith("/aiayn"):
            continue
        tag = name.removesuffix("/aiayn")
        for engine, metric in (("hf", "speedup_vs_hf_generate"), ("ct2", "speedup_vs_ctranslate2")):
            if f"{tag}/{engine}" in rates:
                emit(tag, metric, rate / rates[f"{tag}/{engine}"], "x")
        fp32 = tag.replace("/bf16", "/fp32")
        if "/bf16" in tag:
            for other, metric in ((f"{fp32}/hf", "speedup_vs_hf_generate_fp32"), (f"{fp32}/aiayn", "speedup_vs_fp32")):
                if other in rates:
                    emit(tag, metric, rate / rates[other], "x")
        if tag.endswith("/fp32") and f"{tag}-unpacked/aiayn" in rates:
            emit(tag, "speedup_vs_unpacked", rate / rates[f"{tag}-unpacked/aiayn"], "x")


def run(presets: list[str], engines: list[str], min_seconds: float, repeats: int, script: str) -> None:
    """Every engine on every preset, each in its own process, ``repeats`` turns (engines take turns, so a slow
    spell of the machine hits them all); each figure's best, then the ratios."""
    rates: dict[str, float] = {}
    paths: dict[str, str] = {}
    scratch = tempfile.TemporaryDirectory()
    for preset in presets:
        opus = ["--opus-mt-folder", str(opus_mt_folder(Path(scratch.name)))] if preset == "opus-mt" else []
        for _ in range(repeats):
            for engine in engines:
                lines, error = run_worker(script, "translation", engine, preset, "--min-seconds", str(min_seconds),
                                          *opus)
                if error:
                    raise SystemExit(f"{engine} on {preset}: {error}")
                for line in lines:
                    record = json.loads(line)
                    if record["metric"] != "generated_tokens_per_s":  # what a precision runs (layers_of)
                        paths[record["config"]] = record["value"]
                        continue
                    rates[record["config"]] = max(record["value"], rates.get(record["config"], 0.0))
    for config, value in paths.items():
        emit(config, "layers", value, "path")
    for config, value in rates.items():
        emit(config, "generated_tokens_per_s", value, "tokens/s")
    ratios(rates)
