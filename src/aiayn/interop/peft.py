"""LoRA adapters in PEFT's folder format: ``adapter_config.json`` + ``adapter_model.safetensors`` with tensors
named ``base_model.model.<module>.lora_A.weight`` / ``.lora_B.weight``.

The module names are the Hugging Face model's where aiayn's model has a Hugging Face twin with the very same
tensors (a Llama-family model with the halves rotary layout, a Marian model with the halves sinusoid layout, a T5:
what ``aiayn import`` gives and ``aiayn export --format hf`` writes without any permutation), so the adapter
loads with ``PeftModel.from_pretrained`` on the exported model and an adapter PEFT trained loads into aiayn.
Other models keep aiayn's own module names (a PEFT-shaped folder for aiayn alone).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from aiayn.formats import t5
from aiayn.formats.llama import llama_problems, tensor_names
from aiayn.formats.marian import layer_names
from aiayn.formats.t5 import t5_problems
from aiayn.interop.hf_export import marian_problems
from aiayn.io.checkpoint import ADAPTER_CONFIG, ADAPTER_WEIGHTS, read_tensors
from aiayn.model.config import ModelConfig
from aiayn.model.lora import LoRALinear, adapter_state, lora_layers

PREFIX = "base_model.model."
TASK_TYPES = {"decoder-only": "CAUSAL_LM", "encoder-decoder": "SEQ_2_SEQ_LM", "encoder-only": "FEATURE_EXTRACTION"}
UNSUPPORTED = {"use_dora": "DoRA", "use_rslora": "rank-stabilised LoRA", "fan_in_fan_out": "fan_in_fan_out (Conv1D)"}


def hf_modules(cfg: ModelConfig) -> dict[str, str]:
    """aiayn module path -> the Hugging Face twin's, for models whose export needs no permutation ({} else)."""
    if cfg.arch == "decoder-only" and not llama_problems(cfg) and cfg.rope_layout == "halves":
        pairs = [(ours, theirs) for theirs, ours in tensor_names(cfg).items()]
    elif cfg.arch == "encoder-decoder" and not marian_problems(cfg) and cfg.sinusoid_layout == "halves":
        pairs = layer_names(cfg)
    elif cfg.arch == "encoder-decoder" and not t5_problems(cfg):
        pairs = t5.layer_names(cfg)
    else:
        return {}
    return {ours[: -len(".weight")]: theirs[: -len(".weight")] for ours, theirs in pairs if ours.endswith(".weight")}


def save_adapter(model, folder: Path, base: str) -> None:
    """Write ``model``'s adapters into ``folder`` (which exists and is empty: the caller writes atomically); their
    rank, alpha and dropout are the layers' own."""
    from safetensors.torch import save_file

    layers = lora_layers(model)
    if not layers:
        raise ValueError("adapter: the model has no LoRA layers to save")
    names = hf_modules(model.config) or {path: path for path in layers}
    first = next(iter(layers.values()))
    config = {"peft_type": "LORA", "task_type": TASK_TYPES[model.config.arch], "base_model_name_or_path": str(base),
              "r": first.r, "lora_alpha": first.alpha, "lora_dropout": first.dropout.p, "bias": "none",
              "target_modules": sorted({names[path].rsplit(".", 1)[-1] for path in layers}),
              "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "inference_mode": True,
              "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}}
    tensors = {}
    for name, tensor in adapter_state(model).items():
        path, _, leaf = name.removesuffix(".weight").rpartition(".")
        tensors[f"{PREFIX}{names[path]}.{leaf}.weight"] = tensor.float().contiguous()
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(tensors, str(folder / ADAPTER_WEIGHTS))


def read_adapter_config(folder: Path) -> dict:
    path = folder / ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; an adapter folder has adapter_config.json and "
                                f"{ADAPTER_WEIGHTS}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}): {err.msg}") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise ValueError(f"{path}: peft_type {config.get('peft_type') if isinstance(config, dict) else None!r}; "
                         "aiayn reads LORA adapters")
    for key, what in UNSUPPORTED.items():
        if config.get(key):
            raise ValueError(f"{path}: {key} ({what}) is not supported")
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("bias", "none") != "none":
        raise ValueError(f"{path}: per-layer rank_pattern/alpha_pattern and trained biases are not supported")
    if not isinstance(config.get("r"), int) or config["r"] <= 0:
        raise ValueError(f"{path}: r must be a positive integer")
    return config


def read_adapter(model, folder: str | Path) -> dict[str, tuple[Tensor, Tensor, float]]:
    """An adapter folder's updates for ``model``: layer path -> (A (r, in), B (out, r), scaling alpha / r). A
    tensor for a module the model does not have, or of the wrong shape, is a ValueError naming it."""
    folder = Path(folder)
    config = read_adapter_config(folder)
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"{folder / ADAPTER_WEIGHTS}: missing; an adapter folder has it")
    ours = {theirs: mine for mine, theirs in hf_modules(model.config).items()}
    scaling = float(config.get("lora_alpha", config["r"])) / config["r"]
    found = {}
    for module, (a, b) in _by_module(read_tensors(folder / ADAPTER_WEIGHTS), folder).items():
        path = ours.get(module, module)
        base = _linear(model, path, folder)
        for name, tensor, shape in ((f"{module}.lora_A", a, (config["r"], base.in_features)),
                                    (f"{module}.lora_B", b, (base.out_features, config["r"]))):
            if tuple(tensor.shape) != shape:
                raise ValueError(f"{folder / ADAPTER_WEIGHTS}: {name} has shape {tuple(tensor.shape)}, the model "
                                 f"needs {shape}")
        found[path] = (a, b, scaling)
    return found


def load_adapter(model, folder: str | Path) -> list[str]:
    """Wrap the layers the adapter in ``folder`` adapts and load its tensors (unmerged); returns their paths."""
    config = read_adapter_config(Path(folder))
    paths = []
    for path, (a, b, _) in read_adapter(model, folder).items():
        layer = _wrap(model, path, config, Path(folder))
        with torch.no_grad():
            layer.lora_A.weight.copy_(a)
            layer.lora_B.weight.copy_(b)
        paths.append(path)
    return paths


def _by_module(tensors: dict[str, Tensor], folder: Path) -> dict[str, tuple[Tensor, Tensor]]:
    """module -> (A, B) from PEFT's tensor names (the adapter name, if saved, dropped)."""
    found: dict[str, dict[str, Tensor]] = {}
    for name, tensor in tensors.items():
        stem = name.removeprefix(PREFIX).removesuffix(".weight").removesuffix(".default")
        module, _, leaf = stem.rpartition(".")
        if leaf not in ("lora_A", "lora_B"):
            raise ValueError(f"{folder / ADAPTER_WEIGHTS}: tensor {name} is not a LoRA A or B matrix")
        found.setdefault(module, {})[leaf] = tensor
    missing = [m for m, ab in found.items() if len(ab) != 2]
    if missing:
        raise ValueError(f"{folder / ADAPTER_WEIGHTS}: {missing[0]} has only one of lora_A and lora_B")
    return {m: (ab["lora_A"], ab["lora_B"]) for m, ab in found.items()}


def _linear(model, path: str, folder: Path):
    """The linear layer at ``path`` (a LoRA-wrapped one's base), or a ValueError naming what is wrong."""
    parent_path, _, attr = path.rpartition(".")
    try:
        layer = getattr(model.get_submodule(parent_path), attr)
    except AttributeError:
        raise ValueError(f"{folder / ADAPTER_WEIGHTS}: the model has no module {path} (is this adapter for "
                         f"another model?)") from None
    layer = layer.base if isinstance(layer, LoRALinear) else layer
    if type(layer) is not torch.nn.Linear:
        raise ValueError(f"{folder / ADAPTER_WEIGHTS}: module {path} is not a linear layer")
    return layer


def _wrap(model, path: str, config: dict, folder: Path) -> LoRALinear:
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path)
    if isinstance(getattr(parent, attr), LoRALinear):
        return getattr(parent, attr)
    layer = LoRALinear(_linear(model, path, folder), config["r"], float(config.get("lora_alpha", config["r"])),
                       float(config.get("lora_dropout") or 0.0))
    setattr(parent, attr, layer)
    return layer
