"""Why the server computes on one thread (``serve/threads.py``): a decoding step on a second thread, after
the main thread has run PyTorch's parallel kernels itself (as loading a model does), against the same step
when the main thread kept one compute thread. Each setting runs in a fresh process, one after the other.
Prints JSON lines {"config", "metric", "value", "unit"}.

    python benchmarks/bench_threads.py [--checkpoint RUN] [--batch 16] [--steps 200]

Without --checkpoint a random decoder-only model with the char recipe's dimensions (4 layers, d 128) is used.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

from common import emit


def child(args) -> None:
    """Load (on the main thread), then time ``args.steps`` decoding steps of the model on a second thread."""
    import torch

    from aiayn.serve.threads import single_threaded_main

    threads = single_threaded_main() if args.guard else None
    model = load_model(args.checkpoint)
    model(torch.randint(5, 60, (4, 64)))  # the main thread computes, as loading and warming up do
    result = {}

    def decode() -> None:
        from aiayn.decoding.config import DecodingConfig
        from aiayn.decoding.engine import Engine
        from aiayn.serve.scheduler import DecodeJob

        engine = Engine(model, capacity=64 + 2 * args.steps + 8)
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.no_grad():
            for i in range(args.batch):
                sampled = DecodingConfig(strategy="sample", seed=i, max_new_tokens=2 * args.steps)
                job = DecodeJob(list(range(5, 37)), sampled)
                engine.admit(*job.group(model))
            engine.join()
            for i in range(20 + args.steps):  # the model's step on the running batch, a fixed next token
                if i == 20:
                    started = time.perf_counter()
                model.step(engine.tokens, engine.state)
                engine.tokens = torch.cat([engine.tokens, engine.tokens[:, -1:]], dim=1)  # (B, W+1)
            result["ms"] = (time.perf_counter() - started) / args.steps * 1000

    thread = threading.Thread(target=decode)
    thread.start()
    thread.join()
    print(json.dumps(result))


def load_model(checkpoint: str | None):
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import inference_copy
    from aiayn.model.config import ModelConfig
    from aiayn.model.decoder_only import DecoderOnly

    if checkpoint:
        model, _ = load_checkpoint(checkpoint, "decoder-only")
    else:
        model = DecoderOnly(ModelConfig(arch="decoder-only", vocab_size=70, d_model=128, n_heads=4,
                                        n_decoder_layers=4, d_ff=512, dropout=0.0, positions="rope", max_len=1024))
    return inference_copy(model, "cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--guard", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    tag = f"decoder-only step, batch {args.batch}, on a second thread"
    ms = {}
    for name, guard in (("main thread also computed", False), ("main thread single-threaded", True)):
        command = [sys.executable, __file__, "--child", "--batch", str(args.batch), "--steps", str(args.steps)]
        command += ["--guard"] * guard + (["--checkpoint", args.checkpoint] if args.checkpoint else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        ms[name] = json.loads(out.splitlines()[-1])["ms"]
        emit(f"{tag}/{name}", "step_time", ms[name], "ms")
    emit(tag, "speedup_single_threaded_main", ms["main thread also computed"] / ms["main thread single-threaded"], "x")


if __name__ == "__main__":
    main()
