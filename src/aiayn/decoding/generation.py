"""``aiayn.generate``: the one entry to every decoding strategy (greedy, speculative greedy, beam, sample,
mask-predict), and
``rows_for``: the engine group a :class:`DecodingConfig` decodes with, for the library and the server alike.

The Translator, the text generator, the server and the validation loop decode through it; so does the
library user. The options are a :class:`~aiayn.decoding.config.DecodingConfig`, or its fields by name.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from aiayn.decoding.beam import BeamRows
from aiayn.decoding.config import TEXT_MAX_NEW_TOKENS, DecodingConfig
from aiayn.decoding.core import length_limits
from aiayn.decoding.engine import Rows, run
from aiayn.decoding.greedy import TokenRows, argmax
from aiayn.decoding.mask_predict import mask_predict
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import sampled_rows
from aiayn.decoding.speculative import SpeculativeStats, speculative_greedy
from aiayn.model.transformer import TransformerModel


def generate(model: TransformerModel, src_ids: Tensor, strategy: str | None = None, *,
             config: DecodingConfig | None = None, max_new_tokens: Tensor | int | None = None,
             use_cache: bool = True, draft_model: TransformerModel | None = None,
             prompt_cache: PromptCache | None = None, draft_tokens: int = 4,
             speculative_stats: SpeculativeStats | None = None,
             on_token: Callable[[Tensor, Tensor], None] | None = None, candidates: Tensor | None = None,
             **options) -> list[list[int]]:
    """Generate token ids for each row of ``src_ids``.

    Args:
        src_ids: (B, S) source ids for an encoder-decoder, or the prompts for a decoder-only model,
            right-padded with pad_id (prompts of different lengths are fine).
        strategy, options: ``config`` (default ``DecodingConfig()``) with these fields replaced
            (``beam_size=4``, ``length_penalty=0.6``, ``temperature=0.8``, ...). Without a strategy: greedy.
        max_new_tokens: an int, or a (B,) tensor of per-row limits. An encoder-decoder's limit of a row is
            ``max_len_a * its source length + max_len_b`` (``max_len_b=None``: no such limit), capped by
            ``max_new_tokens``; a decoder-only model's is ``max_new_tokens`` (default 200).
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
    per_row = max_new_tokens if isinstance(max_new_tokens, Tensor) else None
    given = {"strategy": strategy, "max_new_tokens": None if per_row is not None else max_new_tokens}
    cfg = (config or DecodingConfig()).replace(**{k: v for k, v in given.items() if v is not None}, **options)
    model.eval()
    chosen = strategy_of(cfg)
    if candidates is not None and (draft_model is not None or chosen == "sample"):
        raise ValueError("candidates: a shortlist is for greedy and beam search, without a draft model")
    if chosen == "mask-predict":
        if candidates is not None or draft_model is not None or cfg.num_return_sequences != 1:
            raise ValueError("strategy mask-predict: one translation per input, without a shortlist or a draft")
        return mask_predict(model, src_ids, cfg.iterations, cfg.length_beam, _limits(model, src_ids, cfg, per_row))
    if draft_model is not None:
        if chosen != "greedy" or cfg.num_return_sequences != 1:
            raise ValueError("draft_model: speculative decoding is greedy; use strategy='greedy'")
        return speculative_greedy(model, draft_model, src_ids, _limits(model, src_ids, cfg, per_row), draft_tokens,
                                  cfg.min_new_tokens, speculative_stats)[0]
    group, inputs, beams = rows_for(model, src_ids, cfg, per_row, on_token)
    run(model, group, inputs, beams, use_cache, candidates, prompt_cache)
    if chosen == "beam":
        return [h.tokens for hyps in group.nbest() for h in hyps[:cfg.num_return_sequences]]
    return group.results()


def strategy_of(cfg: DecodingConfig) -> str:
    """greedy, beam or sample: the one named (greedy by default; sampling at temperature 0 is greedy)."""
    chosen = cfg.chosen_strategy("greedy")
    return "greedy" if chosen == "sample" and cfg.temperature == 0 else chosen


def rows_for(model: TransformerModel, src_ids: Tensor, cfg: DecodingConfig, per_row: Tensor | None = None,
             on_token: Callable[[Tensor, Tensor], None] | None = None) -> tuple[Rows, Tensor, int]:
    """The engine group that decodes ``src_ids`` (B, S) as ``cfg`` says: ``(group, inputs, beams)`` to
    :meth:`Engine.admit <aiayn.decoding.engine.Engine.admit>` (sampling n per input repeats each input n times;
    beam search makes each input stand for ``beam_size`` rows). ``per_row``: (B,) limits replacing
    ``cfg.max_new_tokens``. The library's :func:`generate` and the server both build their groups here."""
    chosen, limits, eos, pad = strategy_of(cfg), _limits(model, src_ids, cfg, per_row), model.config.eos_id, \
        model.config.pad_id
    if chosen == "mask-predict":
        raise ValueError("strategy mask-predict: decodes every position at once, not token by token; use generate")
    if chosen == "greedy":
        if cfg.num_return_sequences != 1:
            raise ValueError("num_return_sequences: greedy search returns one sequence; use beam or sample")
        return TokenRows(limits, argmax, eos, pad, cfg.min_new_tokens, on_token), src_ids, 1
    if chosen == "beam":
        if cfg.num_return_sequences > cfg.beam_size:
            raise ValueError(f"num_return_sequences: at most beam_size={cfg.beam_size} for beam search")
        return BeamRows(limits.tolist(), cfg.beam_size, eos, cfg.min_new_tokens, cfg.length_penalty), src_ids, \
            cfg.beam_size
    n = cfg.num_return_sequences
    group = sampled_rows(model, limits.repeat_interleave(n), cfg.min_new_tokens, cfg.temperature, cfg.top_k,
                         cfg.top_p, cfg.seed, on_token)
    return group, src_ids.repeat_interleave(n, dim=0), 1  # (B*n, S)


def _limits(model: TransformerModel, src_ids: Tensor, cfg: DecodingConfig, per_row: Tensor | None) -> Tensor:
    """New tokens allowed per row (B,): relative to the source for translation, else a fixed number."""
    cap = per_row if per_row is not None else cfg.max_new_tokens
    if model.config.arch == "encoder-decoder":
        return length_limits(src_ids, model.config.pad_id, cap, cfg.max_len_a, cfg.max_len_b)
    return length_limits(src_ids, model.config.pad_id, TEXT_MAX_NEW_TOKENS if cap is None else cap)
