"""Decoding lives outside the model: strategies drive ``encode`` / ``decode`` with a KV cache.

The names below load on first use (PEP 562): ``aiayn.decoding.config`` (the options, no torch) can be read by
the command line without loading torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"Hypothesis": "beam", "beam_search": "generation", "generate": "generation",
            "greedy_search": "generation", "PromptCache": "prefix", "SourceCache": "source_cache",
            "filter_logits": "sampling", "sample": "generation", "SpeculativeStats": "speculative",
            "speculative_greedy": "generation", "DecodingConfig": "config"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aiayn.decoding' has no attribute {name!r}")
    return getattr(importlib.import_module(f"aiayn.decoding.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
