"""Training throughput: target tokens/s and peak memory, aiayn against torch.nn.Transformer.

Random batches, source and target length 24, about 2048 target tokens a batch (85 sentences), one full
training step each (forward, label-smoothed loss, backward, Adam). Every (preset, implementation) runs
in its own process, one after the other, so peak memory is its own; compare the ratios printed at the end
(same run, same machine). Prints JSON lines: {"config", "metric", "value", "unit"}.

    python benchmarks/bench_train.py [--presets small base] [--steps 10] [--compile] [--bf16]

``--bf16`` adds both implementations under CPU bf16 autocast (mixed precision, as ``--precision bf16``
trains), so the gain of the precision and the gain of the code can be told apart.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from common import emit

SRC_LEN = TGT_LEN = 24
BATCH = 2048 // TGT_LEN  # 85 sentences, 2040 target tokens
VOCAB = 8000


def build(preset: str, impl: str):
    """A model and a function from (src, tgt) to logits, for ``impl`` in ours | torch."""
    from aiayn import EncoderDecoder, ModelConfig

    cfg = ModelConfig.preset(preset, vocab_size=VOCAB, dropout=0.1)
    if impl == "ours":
        model = EncoderDecoder(cfg)
        return model, model
    ref = torch.nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
                               cfg.dropout, batch_first=True)
    emb, out = torch.nn.Embedding(VOCAB, cfg.d_model), torch.nn.Linear(cfg.d_model, VOCAB, bias=False)
    out.weight = emb.weight
    model = torch.nn.ModuleDict({"transformer": ref, "emb": emb, "out": out})
    causal = torch.nn.Transformer.generate_square_subsequent_mask(TGT_LEN)
    scale = cfg.d_model ** 0.5

    def forward(src, tgt):
        return out(ref(emb(src) * scale, emb(tgt) * scale, tgt_mask=causal, tgt_is_causal=True))

    return model, forward


def worker(preset: str, impl: str, steps: int, compile_: bool, bf16: bool) -> dict:
    torch.manual_seed(0)
    model, forward = build(preset, impl)
    model.train()
    if compile_:
        forward = torch.compile(forward)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src = torch.randint(5, VOCAB, (BATCH, SRC_LEN))
    tgt = torch.randint(5, VOCAB, (BATCH, TGT_LEN + 1))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = forward(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3 if compile_ else 2):  # warm-up (and compilation)
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens_per_s": BATCH * TGT_LEN * steps / elapsed, "peak_rss_mib": peak_mib}


def label(preset: str, impl: str, compile_: bool, bf16: bool) -> str:
    return f"{preset}/{impl}{'+compile' if compile_ else ''}{'+bf16' if bf16 else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also measure aiayn under torch.compile")
    parser.add_argument("--bf16", action="store_true", help="also measure aiayn with bf16 autocast")
    parser.add_argument("--worker", nargs=4, metavar=("PRESET", "IMPL", "COMPILE", "BF16"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        preset, impl, comp, bf16 = args.worker
        print(json.dumps(worker(preset, impl, args.steps, comp == "1", bf16 == "1")))
        return
    variants = [("torch", False, False), ("ours", False, False)]
    variants += [("ours", True, False)] * args.compile + [("torch", False, True), ("ours", False, True)] * args.bf16
    for preset in args.presets:
        rates = {}
        for impl, comp, bf16 in variants:
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--worker", preset, impl,
                   str(int(comp)), str(int(bf16))]
            result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            name = label(preset, impl, comp, bf16)
            rates[name] = result["tokens_per_s"]
            emit(name, "train_tgt_tokens_per_s", float(result["tokens_per_s"]), "tokens/s", digits=1)
            emit(name, "peak_rss", float(result["peak_rss_mib"]), "MiB", digits=1)
        report_speedups(preset, rates)


def report_speedups(preset: str, rates: dict[str, float]) -> None:
    """Each aiayn variant against fp32 torch.nn.Transformer, and against it in the same precision."""
    base = rates[label(preset, "torch", False, False)]
    for name, rate in rates.items():
        if "/torch" in name:
            continue
        emit(name, "speedup_vs_torch_nn_transformer", rate / base, "x")
        if name.endswith("+bf16"):
            same = rates[label(preset, "torch", False, True)]
            emit(name, "speedup_vs_torch_nn_transformer_bf16", rate / same, "x")


if __name__ == "__main__":
    main()
