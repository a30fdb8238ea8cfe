"""Decoding lives outside the model: strategies drive ``encode`` / ``decode`` with a KV cache."""

from aiayn.decoding.greedy import greedy_search

__all__ = ["greedy_search"]
