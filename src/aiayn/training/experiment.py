"""Experiments: one command trains a set of variants of a recipe under the same budget and writes a table
and pictures (the paper's Table 3, re-run small: ``experiments/table3.yaml``).

An experiment file (YAML)::

    recipe: configs/multi30k-de-en.yaml     # the base recipe (a path, relative to the working folder)
    changes: {time_limit_min: 8}            # applied to every variant: the budget
    output: runs/table3
    long_valid: 0.1                         # optional: also BLEU on the longest 10% of validation
    variants:
      base: {}
      heads-1: {model: {n_heads: 1}}        # ``model`` changes merge into the recipe's model
    groups:                                 # optional: one picture panel per question
      heads: [base, heads-1]

Each variant trains into ``output/NAME``; a variant with ``result.json`` is done and skipped, one with a
``last/`` checkpoint resumes, so an interrupted experiment continues where it stopped. ``output`` gets
``results.json``, ``results.md`` (the table), ``curves.png`` (validation curves) and, with ``groups``,
``questions.png`` (validation BLEU against step, one panel per group with at least two of its variants done).
"""

from __future__ import annotations

import json
from pathlib import Path

from aiayn.io.files import atomic_write_text, output_folder
from aiayn.io.run import RunFolder
from aiayn.training.config import TrainConfig, read_recipe, resume_config

KEYS = ("recipe", "changes", "output", "variants", "long_valid", "groups")


def read_experiment(path: str | Path) -> dict:
    """The experiment file, checked: unknown keys, a missing recipe or no variants are one-line errors."""
    spec = read_recipe(path)
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
    if not isinstance(spec.get("variants"), dict) or not spec["variants"]:
        raise ValueError(f"{path}: variants: give at least one, as NAME: {{changes}}")
    for key in ("recipe", "output"):
        if not isinstance(spec.get(key), str):
            raise ValueError(f"{path}: {key}: missing (a path)")
    groups = spec.get("groups") or {}
    if not isinstance(groups, dict):
        raise ValueError(f"{path}: groups: give QUESTION: [variant, ...] pairs")
    for group, names in groups.items():
        if not isinstance(names, list) or not names or any(n not in spec["variants"] for n in names):
            raise ValueError(f"{path}: groups: {group}: give a non-empty list of the file's variants (got {names!r})")
    return spec


def variant_config(spec: dict, name: str, data_dir: str | None = None) -> TrainConfig:
    """The recipe of variant ``name``: base recipe, then the shared changes, then the variant's own
    (``data_dir``: a local copy of the corpus, for every variant)."""
    recipe = read_recipe(spec["recipe"]) | ({"data_dir": data_dir} if data_dir else {})
    for changes in (spec.get("changes") or {}, spec["variants"][name] or {}):
        model = {**recipe.get("model", {}), **changes.get("model", {})}
        recipe = {**recipe, **changes, "model": model}
    recipe["output"] = str(Path(spec["output"]) / name)
    return TrainConfig.from_dict(recipe, source=f"variant {name}")


def run_experiment(path: str | Path, only: list[str] | None = None, data_dir: str | None = None,
                   overwrite: bool = False) -> list[dict]:
    """Train every variant not done yet (or those in ``only``), then write the table and the pictures."""
    from aiayn.training.trainer import Trainer

    spec = read_experiment(path)
    output_folder(spec["output"], "experiment", overwrite, own_files=("results.json",))
    names = list(spec["variants"])
    for name in only or names:
        if name not in names:
            raise ValueError(f"--only: no variant {name!r}; the file has {', '.join(names)}")
        cfg = variant_config(spec, name, data_dir)
        folder = Path(cfg.output)
        if (folder / "result.json").is_file():
            continue
        run = RunFolder(folder)
        resume = run.resumable()
        if resume:  # the same check as aiayn train --resume: only limits may differ from the run's recipe
            cfg, _ = resume_config(run, cfg.to_dict(), f"variant {name}")
        Trainer(cfg, resume=resume).train()
        atomic_write_text(folder / "result.json", json.dumps(summarize(cfg, spec)) + "\n")
    return write_report(spec)


def summarize(cfg: TrainConfig, spec: dict) -> dict:
    """Best validation BLEU (and its step), last validation loss, steps and training minutes of one run."""
    rows = RunFolder(cfg.output).records()
    valid = [r for r in rows if "valid_loss" in r]
    best = max(valid, key=lambda r: r.get("valid_bleu", -r["valid_loss"]))
    result = {"best_valid_bleu": best.get("valid_bleu"), "best_step": best["step"],
              "last_valid_loss": valid[-1]["valid_loss"], "steps": valid[-1]["step"], "minutes": valid[-1]["time_min"],
              "curve": [(r["step"], r.get("valid_bleu"), r["valid_loss"]) for r in valid]}
    if spec.get("long_valid"):
        result["long_valid_bleu"] = long_valid_bleu(cfg, spec["long_valid"])
    return result


def long_valid_bleu(cfg: TrainConfig, share: float) -> float:
    """sacreBLEU of the best checkpoint on the longest ``share`` of the validation pairs (by source words):
    how far positions carry a model beyond the lengths it trained on."""
    from aiayn.evaluation import score
    from aiayn.inference.translator import Translator
    from aiayn.training.build import load_data

    valid = load_data(cfg).valid
    order = sorted(range(len(valid)), key=lambda i: len(valid.sources[i].split()), reverse=True)
    chosen = order[: max(1, int(len(order) * share))]
    translator = Translator.from_checkpoint(cfg.output)  # the run's decoding (its generation.json)
    outputs = translator.translate([valid.sources[i] for i in chosen], max_new_tokens=256)
    return round(score(outputs, [valid.targets[i] for i in chosen]).bleu, 2)


def write_report(spec: dict) -> list[dict]:
    """results.json, results.md and curves.png in the experiment's output folder, for the variants done."""
    out = Path(spec["output"])
    rows = []
    for name, changes in spec["variants"].items():
        path = out / name / "result.json"
        if path.is_file():
            rows.append({"variant": name, "changes": changes or {}, **json.loads(path.read_text())})
    atomic_write_text(out / "results.json", json.dumps(rows, indent=1) + "\n")
    atomic_write_text(out / "results.md", markdown_table(rows))
    if rows:
        plot_curves(rows, out / "curves.png")
    if rows and spec.get("groups"):
        plot_groups(rows, spec["groups"], out / "questions.png")
    return rows


def common_step(rows: list[dict]) -> int | None:
    """The last validation step every variant reached: under a time budget, where they compare at equal steps."""
    steps = set.intersection(*({c[0] for c in r["curve"]} for r in rows)) if rows else set()
    return max(steps, default=None)


def markdown_table(rows: list[dict]) -> str:
    long = any("long_valid_bleu" in r for r in rows)
    step = common_step(rows)
    head = ["variant", "changes", f"valid BLEU at step {step}", "best valid BLEU", "at step", "last valid loss",
            "steps", "minutes"]
    lines = ["| " + " | ".join(head + (["BLEU, longest valid"] if long else [])) + " |",
             "|" + " --- |" * (len(head) + long)]
    for r in rows:
        at_step = next((c[1] for c in r["curve"] if c[0] == step), None)
        cells = [r["variant"], f"`{json.dumps(r['changes'])}`", at_step, r["best_valid_bleu"], r["best_step"],
                 r["last_valid_loss"], r["steps"], r["minutes"]] + ([r.get("long_valid_bleu")] if long else [])
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(rows: list[dict], path: Path) -> Path:
    """Validation BLEU (or loss, for runs without BLEU) against step, one line per variant."""
    from aiayn.visual.figures import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for r in rows:
        steps = [c[0] for c in r["curve"]]
        if all(c[1] is not None for c in r["curve"]):
            axes[0].plot(steps, [c[1] for c in r["curve"]], marker="o", label=r["variant"])
        axes[1].plot(steps, [c[2] for c in r["curve"]], marker="o", label=r["variant"])
    axes[0].set(xlabel="step", ylabel="validation BLEU", title="validation BLEU")
    axes[1].set(xlabel="step", ylabel="validation loss (nats/token)", title="validation loss")
    for ax in axes:  # ten colours in matplotlib's cycle: the next ten variants get dashed lines
        for i, line in enumerate(ax.get_lines()):
            line.set_linestyle("-" if i < 10 else "--")
    axes[1].legend(fontsize=8)
    return save_figure(fig, path)


def plot_groups(rows: list[dict], groups: dict[str, list[str]], path: Path) -> Path | None:
    """Validation BLEU against step, one panel per group (a question) with at least two of its variants done
    (one curve answers nothing); None when no group has two."""
    from aiayn.visual.figures import pyplot, save_figure

    done = {r["variant"]: r for r in rows if r["curve"][0][1] is not None}
    answered = {group: [n for n in names if n in done] for group, names in groups.items()}
    answered = {group: names for group, names in answered.items() if len(names) >= 2}
    if not answered:
        return None
    cols = min(3, len(answered))
    n_rows = -(-len(answered) // cols)  # ceil
    fig, axes = pyplot().subplots(n_rows, cols, figsize=(4.2 * cols, 3.2 * n_rows), layout="constrained",
                                  squeeze=False)
    for ax, (group, names) in zip(axes.flat, answered.items(), strict=False):  # spare panels stay empty
        for name in names:
            curve = done[name]["curve"]
            ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", label=name)
        ax.set(title=group, xlabel="step", ylabel="validation BLEU")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(answered):]:
        ax.set_visible(False)
    return save_figure(fig, path)
