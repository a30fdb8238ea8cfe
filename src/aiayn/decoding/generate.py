"""``aiayn.generate``: the one entry to every decoding strategy (greedy, speculative greedy, beam, sample).

The Translator, the server and the validation loop decode through it; so does the library user.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from aiayn.decoding.beam import beam_search
from aiayn.decoding.core import length_limits
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import sample
from aiayn.decoding.speculative import SpeculativeStats, speculative_greedy
from aiayn.model.transformer import TransformerModel

STRATEGIES = ("greedy", "beam", "sample")


def generate(model: TransformerModel, src_ids: Tensor, strategy: str = "greedy", beam_size: int = 4,
             max_new_tokens: Tensor | int | None = 128, min_new_tokens: int = 0, length_penalty: float = 1.0,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
             use_cache: bool = True, num_return_sequences: int = 1, draft_model: TransformerModel | None = None,
             prompt_cache: PromptCache | None = None, *, max_len_a: float = 0.0, max_len_b: int | None = None,
             draft_tokens: int = 4, speculative_stats: SpeculativeStats | None = None,
             on_token: Callable[[Tensor, Tensor], None] | None = None,
             candidates: Tensor | None = None) -> list[list[int]]:
    """Generate token ids for each row of ``src_ids``.

    Args:
        src_ids: (B, S) source ids for an encoder-decoder, or the prompts for a decoder-only model,
            right-padded with pad_id (prompts of different lengths are fine).
        strategy: greedy | beam (GNMT ``length_penalty`` alpha) | sample (temperature, top_k, top_p, seed).
        max_new_tokens: an int or a (B,) tensor of per-row limits; with ``max_len_b``, the limit of a row is
            ``max_len_a * its input length + max_len_b``, capped by ``max_new_tokens`` (None = no cap).
        num_return_sequences: for beam, the n best; for sampling, n samples; greedy allows 1.
        draft_model: greedy only: speculative decoding with this draft (same output, fewer main passes),
            proposing ``draft_tokens`` per main pass; counts are added to ``speculative_stats`` if given.
        prompt_cache: decoder-only, one prompt: reuse the stored keys/values of its longest cached prefix.
        on_token: greedy and sample: called with the next ids (B,) and which rows are still live (B,), after
            every step (streaming).
        candidates: greedy and beam: (C,) the only token ids that may be generated, a vocabulary shortlist
            (``aiayn.inference.shortlist``): the output projection is cut to their rows and the search runs over
            them only.
    Returns:
        B * num_return_sequences lists of generated ids (grouped per input), without BOS and EOS.
    """
    model.eval()
    if candidates is not None and (draft_model is not None or strategy == "sample"):
        raise ValueError("candidates: a shortlist is for greedy and beam search, without a draft model")
    limits = length_limits(src_ids, model.config.pad_id, max_new_tokens, max_len_a, max_len_b)  # (B,)
    if strategy == "greedy":
        if num_return_sequences != 1:
            raise ValueError("num_return_sequences: greedy search returns one sequence; use beam or sample")
        if draft_model is not None:
            return speculative_greedy(model, draft_model, src_ids, limits, draft_tokens, min_new_tokens,
                                      speculative_stats)[0]
        return greedy_search(model, src_ids, limits, min_new_tokens, use_cache, prompt_cache, on_token, candidates)
    if draft_model is not None:
        raise ValueError("draft_model: speculative decoding is greedy; use strategy='greedy'")
    if strategy == "beam":
        if not 1 <= num_return_sequences <= beam_size:
            raise ValueError(f"num_return_sequences: must be between 1 and beam_size={beam_size}")
        nbest = beam_search(model, src_ids, beam_size, limits, min_new_tokens, length_penalty, use_cache,
                            candidates)
        return [h.tokens for hyps in nbest for h in hyps[:num_return_sequences]]
    if strategy == "sample":
        return sample(model, src_ids, limits, min_new_tokens, temperature, top_k, top_p, seed,
                      num_return_sequences, use_cache, prompt_cache, on_token)
    raise ValueError(f"strategy: unknown value {strategy!r}; choose one of {', '.join(STRATEGIES)}")
