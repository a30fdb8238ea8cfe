"""Shared test helpers."""

from __future__ import annotations

import pytest
import torch

from aiayn import ModelConfig


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny(**overrides) -> ModelConfig:
    """A tiny config for fast tests (dropout off unless asked)."""
    return ModelConfig.preset("tiny", **{"vocab_size": 40, "dropout": 0.0, "max_len": 64, **overrides})


def random_ids(batch: int, length: int, vocab: int = 40, low: int = 4) -> torch.Tensor:
    """Ids above the special tokens, so none of them is padding."""
    return torch.randint(low, vocab, (batch, length))
