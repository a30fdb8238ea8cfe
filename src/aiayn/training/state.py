"""Checkpoint folders: model + tokenizer + trainer state, all without pickle (safetensors + JSON).

A checkpoint folder holds ``config.json``, ``model.safetensors``, the tokenizer model(s), and, for
resuming, ``trainer.json`` (step, data position, best score, optimizer hyper-parameters) and
``trainer.safetensors`` (optimizer moments and RNG states). Folders are written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from aiayn.interop.peft import save_adapter
from aiayn.io.checkpoint import write_checkpoint
from aiayn.io.files import atomic_write_text, read_json
from aiayn.io.run import TRAINER_JSON, TRAINER_TENSORS, RunFolder
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import TokenizerPair


def optimizer_tensors(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state (``optimizer.state_dict()``) into named tensors (for safetensors) and JSON-able
    hyper-parameters."""
    tensors = {}
    for idx, slots in state["state"].items():
        for name, value in slots.items():
            tensors[f"optim.{idx}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return tensors, {"param_groups": state["param_groups"]}


def optimizer_state(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    """The optimizer state (as ``optimizer.state_dict()`` gives it) that :func:`optimizer_tensors` split."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_tensors() -> dict[str, torch.Tensor]:
    tensors = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    return tensors


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(folder: Path, model: TransformerModel, tokenizers: TokenizerPair,
                    optimizer: dict | None = None, trainer: dict | None = None,
                    generation: dict | None = None, adapter_of: str | None = None) -> None:
    """Write a checkpoint folder atomically (``io/checkpoint.py``'s one writer); with ``optimizer`` (its state
    dict) and ``trainer`` it can resume training. With ``adapter_of`` (the base checkpoint of a LoRA run) the
    folder holds the adapter alone, in PEFT's format (torchtune's ``adapter_only``)."""

    def write_state(tmp: Path) -> None:
        tensors, meta = optimizer_tensors(optimizer)
        save_file({**tensors, **rng_tensors()}, str(tmp / TRAINER_TENSORS))
        atomic_write_text(tmp / TRAINER_JSON, json.dumps({**trainer, **meta}, indent=1) + "\n")

    resumable = optimizer is not None and trainer is not None
    extra = write_state if resumable else None
    if adapter_of is None:
        write_checkpoint(folder, model, tokenizers, extra, generation, by="train")
    else:
        write_checkpoint(folder, model, write_extra=extra, by="train",
                         write_model=lambda tmp: save_adapter(model, tmp, base=adapter_of))


def load_trainer_state(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The JSON and tensor halves of a checkpoint's trainer state; damaged files are errors naming them."""
    from safetensors import SafetensorError

    meta_file, tensor_file = folder / TRAINER_JSON, folder / TRAINER_TENSORS
    if not (meta_file.is_file() and tensor_file.is_file()):
        raise FileNotFoundError(f"{folder}: no trainer state (trainer.json, trainer.safetensors) to resume from")
    meta = read_json(meta_file)
    missing = sorted({"step", "epoch", "batch_pos", "best", "bad_evals", "train_seconds", "param_groups"} - set(meta))
    if missing:
        raise ValueError(f"{meta_file}: damaged, missing {', '.join(missing)}; resume from another checkpoint")
    try:
        return meta, load_file(str(tensor_file))
    except SafetensorError as err:
        raise ValueError(f"{tensor_file}: damaged or truncated ({err})") from None


def save_evaluated(run: RunFolder, model: TransformerModel, tokenizers: TokenizerPair, optimizer: dict, state: dict,
                   generation, keep_last: int, improved: bool, **adapter) -> None:
    """A run's checkpoints at one evaluation, in the order a kill in between resumes from: ``checkpoints/step_N/``
    (the last ``keep_last`` kept), ``best/`` when the score ``improved``, then ``last/`` with the trainer's
    ``state`` and ``optimizer`` (what ``--resume`` reads). ``adapter``: a LoRA run's (:func:`save_checkpoint`)."""
    if keep_last > 0:
        save_checkpoint(run.step(state["step"]), model, tokenizers, generation=generation, **adapter)
        run.prune(keep_last)
    if improved:
        save_checkpoint(run.best, model, tokenizers, generation=generation, **adapter)
    save_checkpoint(run.last, model, tokenizers, optimizer, state, generation, **adapter)
