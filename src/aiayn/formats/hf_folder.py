"""Reading a local Hugging Face model folder: ``config.json``, the weights (``model.safetensors``; a folder with
only ``pytorch_model.bin`` is read with ``torch.load(weights_only=True)``, which unpickles tensors only), and
mapping its tensors onto aiayn's modules. Nothing here downloads: users bring the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import Tensor

from aiayn.tokenizers.hf import HFTokenizers

# model_type values of config.json

def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; give a Hugging Face model folder (config.json, "
                                "model.safetensors, tokenizer files)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}): {err.msg}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object of the model's settings")
    return config


INDEX = "model.safetensors.index.json"


def weight_files(folder: Path) -> dict[Path, list[str] | None]:
    """The weight files of a folder and the tensors each must hold (None: whatever it has): one
    ``model.safetensors``, or the shards that ``model.safetensors.index.json``'s ``weight_map`` names."""
    if (folder / "model.safetensors").is_file():
        return {folder / "model.safetensors": None}
    index = folder / INDEX
    if not index.is_file():
        return {}
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{index}: not a safetensors index (a JSON object with a weight_map)") from None
    shards: dict[Path, list[str]] = {}
    for tensor, shard in weight_map.items():
        path = folder / str(shard)
        if Path(str(shard)).name != str(shard) or not path.is_file():
            raise ValueError(f"{index}: shard {shard!r} (holding {tensor}) is missing from {folder}")
        shards.setdefault(path, []).append(tensor)
    return shards


def iter_weights(folder: Path, files: dict[Path, list[str] | None] | None = None):
    """Every tensor of the folder's weights as (Hugging Face name, tensor), one at a time: a sharded
    checkpoint is read shard by shard and tensor by tensor, so no second copy of the model is ever held.
    ``files``: :func:`weight_files` of the folder, when the caller has it already."""
    from safetensors import SafetensorError, safe_open

    for path, expected in (weight_files(folder) if files is None else files).items():
        try:
            with safe_open(str(path), framework="pt") as shard:
                names = set(shard.keys())
                for name in expected or []:
                    if name not in names:
                        raise ValueError(f"{folder / INDEX}: tensor {name} is not in {path.name}")
                for name in sorted(names):
                    yield name, shard.get_tensor(name)
        except SafetensorError as err:
            raise ValueError(f"{path}: not a safetensors file ({err})") from None


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weights, by Hugging Face name (a small model's: one dict in memory)."""
    import torch

    files = weight_files(folder)
    if files:
        return dict(iter_weights(folder, files))
    if (folder / "pytorch_model.bin").is_file():
        try:  # tensors only: weights_only refuses any other pickled object
            return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as err:  # any unpickling failure is the file's fault
            raise ValueError(f"{folder / 'pytorch_model.bin'}: not a plain tensor file ({err.__class__.__name__}); "
                             "convert it to model.safetensors with transformers' save_pretrained") from None
    raise FileNotFoundError(f"{folder}: no model.safetensors (nor {INDEX}, nor pytorch_model.bin) in this folder")


def folder_tokenizers(folder: Path, hf: dict) -> HFTokenizers:
    """The folder's ``tokenizer.json`` tokenizers, exactly as many tokens as ``config.json``'s ``vocab_size``."""
    tokenizers = HFTokenizers.load(folder)
    if len(tokenizers.src) != hf["vocab_size"]:
        raise ValueError(f"{folder / 'tokenizer.json'}: {len(tokenizers.src)} tokens, config.json says "
                         f"vocab_size {hf['vocab_size']}")
    return tokenizers


def take(weights: dict[str, Tensor], name: str, *fallbacks: str) -> Tensor:
    """The tensor ``name`` (or the first fallback present: tied weights are saved once); missing is an error."""
    for key in (name, *fallbacks):
        if key in weights:
            return weights[key]
    raise ValueError(f"weights: tensor {name} is missing")


def load_mapped(model, mapped: dict[str, Tensor]) -> None:
    """Load ``mapped`` (aiayn name -> tensor) into ``model``: every parameter must be given, shapes equal."""
    own = model.state_dict()
    for name, tensor in mapped.items():
        if tuple(own[name].shape) != tuple(tensor.shape):
            raise ValueError(f"weights: tensor for {name} has shape {tuple(tensor.shape)}, the config says "
                             f"{tuple(own[name].shape)}")
    missing = sorted(set(own) - set(mapped))
    if missing:
        raise ValueError(f"weights: nothing for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    model.load_state_dict({k: v.float() for k, v in mapped.items()})


# Hugging Face generation_config.json <-> aiayn's decoding options. Hugging Face's length_penalty divides by
# length ** alpha, not GNMT's ((5 + length) / 6) ** alpha: a different formula, so it is not carried over.
HF_GENERATION = {"num_beams": "beam_size", "max_new_tokens": "max_new_tokens", "min_new_tokens": "min_new_tokens",
                 "temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
                 "num_return_sequences": "num_return_sequences", "min_p": "min_p",
                 "repetition_penalty": "repetition_penalty"}


def read_generation(folder: Path) -> dict | None:
    """The decoding defaults of a Hugging Face folder's ``generation_config.json`` as aiayn options (None:
    no such file); values aiayn cannot take are a ValueError naming the file."""
    from aiayn.decoding.config import DecodingConfig

    path = folder / "generation_config.json"
    if not path.is_file():
        return None
    try:
        theirs = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}): {err.msg}") from None
    options = {ours: theirs[key] for key, ours in HF_GENERATION.items() if theirs.get(key) is not None}
    if theirs.get("do_sample"):
        options["strategy"] = "sample"
    elif "do_sample" in theirs:  # greedy, said (silent: aiayn.decoding.config.imported_defaults); Hugging Face
        options["temperature"] = 0.0  # ignores a temperature then
    try:
        return DecodingConfig().replace(**options).changes() or None
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def write_generation(folder: Path, decoding) -> None:
    """Put a ``DecodingConfig``'s options into the Hugging Face folder's ``generation_config.json``."""
    path = folder / "generation_config.json"
    theirs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    theirs.update({key: getattr(decoding, ours) for key, ours in HF_GENERATION.items()
                   if getattr(decoding, ours) is not None})
    theirs["do_sample"] = decoding.strategy == "sample"
    path.write_text(json.dumps(theirs, indent=2) + "\n", encoding="utf-8")
