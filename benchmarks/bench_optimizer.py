"""Adam's update: torch's per-tensor loop against its fused kernel (what ``make_optimizer`` uses on CPU and CUDA).

For each preset: the time of one ``optimizer.step()`` over every parameter (random gradients), and the time of a
whole training step of the copy task's tiny model (forward, loss, backward, Adam), the two kinds alternated in
one process so the ratio is measured under the same conditions. Prints JSON lines: {"config", "metric",
"value", "unit"}.

    python benchmarks/bench_optimizer.py [--presets tiny small base] [--repeats 20]
"""

from __future__ import annotations

import argparse
import time

import torch
from common import emit


def adam(model: torch.nn.Module, fused: bool) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused)


def update_ms(preset: str, fused: bool, repeats: int) -> float:
    """Milliseconds per ``step()`` of Adam over the preset's parameters."""
    from aiayn import EncoderDecoder, ModelConfig

    model = EncoderDecoder(ModelConfig.preset(preset, vocab_size=8000))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = adam(model, fused)
    opt.step()  # the state is made on the first step
    start = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    return (time.perf_counter() - start) / repeats * 1e3


def copy_step_ms(fused: bool, repeats: int) -> float:
    """Milliseconds per training step of the copy task's tiny model (batch 64)."""
    from aiayn.data.synthetic import copy_batch
    from aiayn.model.build import build_model
    from aiayn.training.demo import CopyRecipe, copy_config, copy_loss

    torch.manual_seed(0)
    recipe, gen = CopyRecipe(), torch.Generator().manual_seed(0)
    model = build_model(copy_config(recipe)).train()
    opt = adam(model, fused)

    def step() -> None:
        loss = copy_loss(model, *copy_batch(model.config, recipe.batch, gen), recipe, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    for preset in args.presets:
        times = {fused: [] for fused in (False, True)}
        for _ in range(2):  # alternated: a drift in the machine's speed hits both kinds
            for fused in (False, True):
                times[fused].append(update_ms(preset, fused, args.repeats))
        for fused, name in ((False, "loop"), (True, "fused")):
            emit(f"{preset}/adam-{name}", "update_time", min(times[fused]), "ms")
        emit(f"{preset}/fused-vs-loop", "update_speedup", min(times[False]) / min(times[True]), "x")
    steps = {fused: [] for fused in (False, True)}
    for _ in range(2):
        for fused in (False, True):
            steps[fused].append(copy_step_ms(fused, args.repeats * 5))
    for fused, name in ((False, "loop"), (True, "fused")):
        emit(f"copy-task/adam-{name}", "train_step_time", min(steps[fused]), "ms")
    emit("copy-task/fused-vs-loop", "train_step_speedup", min(steps[False]) / min(steps[True]), "x")


if __name__ == "__main__":
    main()
