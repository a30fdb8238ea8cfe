"""sentence-transformers folders -> aiayn's :class:`~aiayn.inference.embed.Pooling`: ``modules.json`` names a
Transformer (the folder root: an ordinary Hugging Face BERT folder), a Pooling module (``1_Pooling/config.json``
in its legacy boolean form or the newer ``pooling_mode`` form) and optionally ``2_Normalize``. The longest
input comes from ``sentence_bert_config.json`` (``max_seq_length``) or, as 6.x writes it, the tokenizer's
``model_max_length``. A module aiayn has no counterpart for (Dense, a second Transformer) is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

from aiayn.inference.embed import MODES, Pooling

MODULES = "modules.json"
LEGACY = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
          "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_weightedmean_tokens": "weightedmean",
          "pooling_mode_lasttoken": "lasttoken"}


def _json(path: Path):
    if not path.is_file():
        raise ValueError(f"{path}: missing; a sentence-transformers folder has it")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}): {err.msg}") from None


def is_sentence_transformers(folder: Path) -> bool:
    return (folder / MODULES).is_file()


def pooling_mode(path: Path) -> str:
    """The one pooling mode of a ``1_Pooling/config.json``, in either form."""
    config = _json(path)
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object")
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [mode for key, mode in LEGACY.items() if config.get(key)]
    if len(modes) != 1 or modes[0] not in MODES:
        raise ValueError(f"{path}: pooling mode {' + '.join(map(str, modes)) or 'none'} is not supported; aiayn "
                         f"pools with one of {', '.join(MODES)}")
    return modes[0]


def read_pooling(folder: Path) -> Pooling:
    """The pooling a sentence-transformers folder describes; its Transformer must be the folder root."""
    modules = _json(folder / MODULES)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{folder / MODULES}: expected a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    unknown = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unknown or kinds.count("Transformer") != 1 or kinds.count("Pooling") > 1:
        raise ValueError(f"{folder / MODULES}: modules {', '.join(kinds)}; aiayn imports one Transformer, a "
                         "Pooling and an optional Normalize")
    transformer = modules[kinds.index("Transformer")]
    if transformer.get("path", "") not in ("", "."):
        raise ValueError(f"{folder / MODULES}: the Transformer is in {transformer['path']!r}; aiayn imports "
                         "folders whose Transformer is the folder itself")
    mode = "mean"
    if "Pooling" in kinds:
        mode = pooling_mode(folder / modules[kinds.index("Pooling")]["path"] / "config.json")
    return Pooling(mode, "Normalize" in kinds, _max_seq_length(folder))


def _max_seq_length(folder: Path) -> int | None:
    settings = folder / "sentence_bert_config.json"
    config = _json(settings) if settings.is_file() else {}
    if config.get("do_lower_case"):
        raise ValueError(f"{settings}: do_lower_case is not supported (lowercase the inputs yourself)")
    if isinstance(config.get("max_seq_length"), int):
        return config["max_seq_length"]
    tokenizer = folder / "tokenizer_config.json"
    length = (_json(tokenizer) if tokenizer.is_file() else {}).get("model_max_length")
    return length if isinstance(length, int) and length < 1_000_000 else None
