"""Dropout's cost on CPU: torch.nn.Dropout (bernoulli_ per element) against aiayn's Dropout (16-bit uniforms).

Two measurements in one process, the two dropouts alternated round by round so that the VM's drift hits both:
- ``op``: forward + backward of dropout alone on a (2900, WIDTH) tensor, the activations of one batch of the
  Multi30k recipes (WIDTH 256: residual dropout; 1024: inside the feed-forward network), fp32 and bf16.
- ``step``: whole training steps (forward under bf16 autocast, label-smoothed loss, backward, Adam) of the
  recipes' model (``small``, pre-norm, rotary, dropout 0.2 / 0.1 / 0.1, 6k vocabulary) on random batches of
  160 sentences of 18 tokens; the same model and weights, its Dropout modules swapped for nn.Dropout.
Prints JSON lines {"config", "metric", "value", "unit"}; compare the ratios.

    python benchmarks/bench_dropout.py [--rounds 3] [--steps 5]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from common import emit
from torch import nn

from aiayn import EncoderDecoder, ModelConfig
from aiayn.model.dropout import Dropout

ROWS, BATCH, LENGTH, VOCAB = 2900, 160, 18, 6000




def op_ms(dropout: nn.Module, width: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """Milliseconds of one forward + backward of ``dropout`` on a (ROWS, width) tensor."""
    x = torch.randn(ROWS, width, dtype=dtype, requires_grad=True)
    grad = torch.randn(ROWS, width, dtype=dtype)
    dropout(x).backward(grad)  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        dropout(x).backward(grad)
    return (time.perf_counter() - start) / repeats * 1e3


def with_torch_dropout(model: nn.Module) -> nn.Module:
    """``model`` with each aiayn Dropout replaced by an nn.Dropout of the same p (weights shared)."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, nn.Dropout(child.p))
    return model


def steps_per_s(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> float:
    src = torch.randint(5, VOCAB, (BATCH, LENGTH))
    tgt = torch.randint(5, VOCAB, (BATCH, LENGTH + 1))
    start = time.perf_counter()
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return steps / (time.perf_counter() - start)


def recipe_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    cfg = ModelConfig.preset("small", vocab_size=VOCAB, norm="pre", positions="rope", dropout=0.2,
                             attention_dropout=0.1, activation_dropout=0.1)
    ours = EncoderDecoder(cfg).train()
    theirs = with_torch_dropout(EncoderDecoder(cfg).train())
    theirs.load_state_dict(ours.state_dict())
    return {"torch.nn.Dropout": theirs, "aiayn.Dropout": ours}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="training steps a round")
    args = parser.parse_args()
    ops = {"torch.nn.Dropout": nn.Dropout(0.2).train(), "aiayn.Dropout": Dropout(0.2).train()}
    for width in (256, 1024):
        for dtype in (torch.float32, torch.bfloat16):
            ms = {name: min(op_ms(op, width, dtype) for _ in range(args.rounds)) for name, op in ops.items()}
            config = f"op/{ROWS}x{width}/{str(dtype).removeprefix('torch.')}"
            for name, value in ms.items():
                emit(f"{config}/{name}", "forward_backward_ms", value, "ms")
            emit(config, "speedup_aiayn_over_torch", ms["torch.nn.Dropout"] / ms["aiayn.Dropout"], "x")
    models = recipe_models()
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4) for name, m in models.items()}
    rates = {name: [] for name in models}
    for name in models:  # warm-up
        steps_per_s(models[name], optimizers[name], 1)
    for _ in range(args.rounds):
        for name in models:
            rates[name].append(steps_per_s(models[name], optimizers[name], args.steps))
    for name, values in rates.items():
        emit(f"step/small-recipe/bf16/{name}", "train_steps_per_s", max(values), "steps/s")
    emit("step/small-recipe/bf16", "speedup_aiayn_over_torch",
         max(rates["aiayn.Dropout"]) / max(rates["torch.nn.Dropout"]), "x")


if __name__ == "__main__":
    main()
