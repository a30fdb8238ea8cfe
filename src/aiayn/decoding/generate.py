"""``aiayn.generate``: one entry for every decoding strategy (greedy, beam, sample)."""

from __future__ import annotations

from torch import Tensor

from aiayn.decoding.beam import beam_search
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import sample
from aiayn.decoding.speculative import speculative_greedy
from aiayn.models import TransformerModel

STRATEGIES = ("greedy", "beam", "sample")


def generate(model: TransformerModel, src_ids: Tensor, strategy: str = "greedy", beam_size: int = 4,
             max_new_tokens: Tensor | int = 128, min_new_tokens: int = 0, length_penalty: float = 1.0,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
             use_cache: bool = True, num_return_sequences: int = 1, draft_model: TransformerModel | None = None,
             prompt_cache: PromptCache | None = None) -> list[list[int]]:
    """Generate token ids for each row of ``src_ids``.

    Args:
        src_ids: (B, S) source ids for an encoder-decoder, or the prompt for a decoder-only model
            (right-padded with pad_id; prompts of one batch should have equal length).
        strategy: greedy | beam (GNMT ``length_penalty`` alpha) | sample (temperature, top_k, top_p, seed).
        num_return_sequences: for beam, the n best; for sampling, n samples; greedy allows 1.
        draft_model: greedy only: speculative decoding with this draft (same output, fewer main passes).
        prompt_cache: decoder-only, one prompt: reuse the stored keys/values of its longest cached prefix.
    Returns:
        B * num_return_sequences lists of generated ids (grouped per input), without BOS and EOS.
    """
    model.eval()
    if strategy == "greedy":
        if num_return_sequences != 1:
            raise ValueError("num_return_sequences: greedy search returns one sequence; use beam or sample")
        if draft_model is not None:
            return speculative_greedy(model, draft_model, src_ids, int(max_new_tokens), 4, min_new_tokens)[0]
        return greedy_search(model, src_ids, max_new_tokens, min_new_tokens, use_cache, prompt_cache)
    if strategy == "beam":
        if not 1 <= num_return_sequences <= beam_size:
            raise ValueError(f"num_return_sequences: must be between 1 and beam_size={beam_size}")
        nbest = beam_search(model, src_ids, beam_size, max_new_tokens, min_new_tokens, length_penalty, use_cache)
        return [h.tokens for hyps in nbest for h in hyps[:num_return_sequences]]
    if strategy == "sample":
        return sample(model, src_ids, max_new_tokens, min_new_tokens, temperature, top_k, top_p, seed,
                      num_return_sequences, use_cache)
    raise ValueError(f"strategy: unknown value {strategy!r}; choose one of {', '.join(STRATEGIES)}")
