"""Decoding lives outside the model: strategies drive ``encode`` / ``decode`` with a KV cache."""

from aiayn.decoding.beam import Hypothesis, beam_search
from aiayn.decoding.generate import generate
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import filter_logits, sample
from aiayn.decoding.speculative import SpeculativeStats, speculative_greedy

__all__ = ["Hypothesis", "PromptCache", "SpeculativeStats", "beam_search", "filter_logits", "generate",
           "greedy_search", "sample", "speculative_greedy"]
