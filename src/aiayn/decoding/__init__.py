"""Decoding lives outside the model: strategies drive ``encode`` / ``decode`` with a KV cache."""

from aiayn.decoding.beam import Hypothesis, beam_search
from aiayn.decoding.greedy import greedy_search

__all__ = ["Hypothesis", "beam_search", "greedy_search"]
