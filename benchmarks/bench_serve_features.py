"""What the application features of the server cost, through its scheduler (``serve/scheduler.py``), on a real model
(an imported checkpoint: SmolLM2-135M-Instruct from its GGUF file, ``aiayn import``):

- ``structured``: greedy tokens/s of requests whose output follows a JSON schema (a token mask per row from
  llguidance each step) against the same requests unconstrained and made as long, at batch 1 and 8 (8 requests
  submitted at once);
- ``adapters``: tokens/s of 8 concurrent requests over 4 LoRA adapters served unmerged (``aiayn serve --lora``: rows
  of every adapter in one batch, the low-rank products gathered per row) against 8 requests of one adapter merged
  into the model (what serving one fine-tuned model costs), and the base model alone. The adapters are random
  (rank 16 on q, k, v, o; the output does not matter here); every request makes exactly 64 tokens.

Each configuration is timed three times after a warm-up (the best is kept), one after the other, on one decoding
thread with the machine's compute threads (as ``aiayn serve`` runs: ``serve/threads.py``). JSON lines {"config",
"metric", "value", "unit"}; compare the ratios of one run.

    aiayn import ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf --output /tmp/smollm2
    python benchmarks/bench_serve_features.py --checkpoint /tmp/smollm2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import torch
from common import emit as print_figure

from aiayn.decoding.config import DecodingConfig
from aiayn.inference.generator import TextGenerator
from aiayn.inference.load import load_checkpoint
from aiayn.interop.peft import read_adapter, save_adapter
from aiayn.model.lora import apply_lora, lora_layers, merge_lora
from aiayn.model.multi_lora import attach_adapters
from aiayn.serve.jobs import Finished
from aiayn.serve.scheduler import DecodeJob, Scheduler
from aiayn.serve.threads import single_threaded_main

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 5}},
    "required": ["name", "age", "hobbies"], "additionalProperties": False}
PROMPT = "Describe a person as JSON with a name, an age and hobbies:"
NEW_TOKENS = 64
THREADS = single_threaded_main()  # as the server: the decoding thread computes with all the threads


emit = partial(print_figure, digits=None)


def timed(generator: TextGenerator, jobs_of) -> tuple[float, int]:
    """Best of three (after a warm-up): seconds for the jobs ``jobs_of()`` makes, submitted at once, to finish;
    and the tokens they made."""
    best, tokens = float("inf"), 0
    for attempt in range(4):
        jobs, done = jobs_of(), threading.Semaphore(0)
        for job in jobs:
            job.emit = _counting(done)
        batcher = Scheduler(generator.model, max_batch=16, capacity=512, threads=THREADS)
        batcher.start()
        started = time.perf_counter()
        batcher.submit(*jobs)
        for _ in jobs:
            done.acquire()
        spent = time.perf_counter() - started
        batcher.stop()
        if attempt:
            best, tokens = min(best, spent), sum(len(j.generated) for j in jobs)
    return best, tokens


def _counting(done: threading.Semaphore):
    return lambda event: isinstance(event, Finished) and done.release()


def structured(generator: TextGenerator) -> None:
    """Constrained requests first; then the same requests free, each as long as its constrained twin was (the
    same steps and prefill: the difference is the masks)."""
    grammar = generator.grammars.compile(json_schema=json.dumps(SCHEMA))
    prompt = generator.rendered_ids(generator.chat_prompt([{"role": "user", "content": PROMPT}]))
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=NEW_TOKENS)
    for batch in (1, 8):
        spent, tokens = timed(generator, lambda n=batch: [DecodeJob(prompt, cfg, grammar=grammar) for _ in range(n)])
        rates = {"json_schema": tokens / spent}
        same = cfg.replace(max_new_tokens=tokens // batch, min_new_tokens=tokens // batch)
        spent, tokens = timed(generator, lambda n=batch, c=same: [DecodeJob(prompt, c) for _ in range(n)])
        rates["free"] = tokens / spent
        for name, rate in rates.items():
            emit(f"structured/{name}/batch{batch}", "tokens_per_s", round(rate, 1), "tokens/s")
        emit(f"structured/batch{batch}", "tokens_per_row", tokens // batch, "tokens")
        emit(f"structured/batch{batch}", "json_schema_over_free", round(rates["json_schema"] / rates["free"], 3),
             "ratio")


def adapters(checkpoint: str) -> None:
    work = Path(tempfile.mkdtemp())
    folders = {}
    for k in range(4):
        model, _ = load_checkpoint(checkpoint)
        apply_lora(model, 16, 32.0, "q,k,v,o")
        torch.manual_seed(k)
        for layer in lora_layers(model).values():
            torch.nn.init.normal_(layer.lora_B.weight, std=0.01)
        folders[f"a{k}"] = work / f"a{k}"
        folders[f"a{k}"].mkdir()
        save_adapter(model, folders[f"a{k}"], checkpoint)
        if k == 0:
            merged = merge_lora(model)
    cfg = DecodingConfig(strategy="greedy", max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    served, tokenizers = load_checkpoint(checkpoint)
    attach_adapters(served, {name: read_adapter(served, folder) for name, folder in folders.items()})
    base, _ = load_checkpoint(checkpoint)
    runs = {"unmerged_4_adapters": (served, lambda i: 1 + i % 4), "merged_1_adapter": (merged, lambda i: 0),
            "base": (base, lambda i: 0)}
    rates = {}
    for name, (model, adapter_of) in runs.items():
        generator = TextGenerator(model, tokenizers)
        prompt = generator.prompt_ids(PROMPT)
        spent, tokens = timed(generator, lambda a=adapter_of, p=prompt: [DecodeJob(p, cfg, adapter=a(i))
                                                                         for i in range(8)])
        rates[name] = tokens / spent
        emit(f"adapters/{name}/8requests", "tokens_per_s", round(rates[name], 1), "tokens/s")
    emit("adapters/8requests", "unmerged_over_merged", round(rates["unmerged_4_adapters"] / rates["merged_1_adapter"],
                                                             3), "ratio")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="an imported language model's checkpoint folder")
    ap.add_argument("--only", choices=["structured", "adapters"])
    args = ap.parse_args()
    if args.only != "adapters":
        structured(TextGenerator.from_checkpoint(args.checkpoint))
    if args.only != "structured":
        adapters(args.checkpoint)


if __name__ == "__main__":
    main()
