"""Greedy search on the scripted model, and a trained decoder-only model continuing its pattern."""

import torch

from aiayn.decoding import greedy_search

from conftest import A, B, ScriptedModel


def test_scripted_greedy_takes_the_locally_best_path():
    assert greedy_search(ScriptedModel(), torch.tensor([[7]]), 5, use_cache=False) == [[A, B]]
