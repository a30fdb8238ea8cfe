"""Decoding lives outside the model: strategies drive ``encode`` / ``decode`` with a KV cache."""

from aiayn.decoding.beam import Hypothesis, beam_search
from aiayn.decoding.generate import generate
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.sampling import filter_logits, sample

__all__ = ["Hypothesis", "beam_search", "filter_logits", "generate", "greedy_search", "sample"]
