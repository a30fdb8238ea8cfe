"""Training: the objective (loss, schedules, optimiser; section 5), tasks, the trainer and its recipe.

``aiayn.training.config`` (the recipe) imports no torch; the rest loads on use.
"""

from __future__ import annotations

import importlib

_OBJECTIVE = ("constant_lr", "cosine_lr", "inverse_sqrt_lr", "label_smoothed_cross_entropy", "make_optimizer",
              "noam_lr", "shift_target")
__all__ = list(_OBJECTIVE)


def __getattr__(name: str):
    if name not in _OBJECTIVE:
        raise AttributeError(f"module 'aiayn.training' has no attribute {name!r}")
    return getattr(importlib.import_module("aiayn.training.objective"), name)
