"""``aiayn.generate``: the one entry to every decoding strategy (greedy, speculative greedy, beam, sample,
mask-predict; ``greedy_search``, ``beam_search`` and ``sample`` are thin wrappers over it), and
``rows_for``: the engine group a resolved :class:`DecodingConfig` decodes with, for the library and the server
alike.

The Translator, the text generator, the server and the validation loop decode through it; so does the
library user. The options are a :class:`~aiayn.decoding.config.DecodingConfig`, or its fields by name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.decoding.beam import BeamRows, Hypothesis
from aiayn.decoding.config import PARALLEL, TEXT_MAX_NEW_TOKENS, DecodingConfig
from aiayn.decoding.constraint import Grammar, Grammars
from aiayn.decoding.core import length_limits
from aiayn.decoding.ctc import best_path
from aiayn.decoding.drafted import DraftedRows
from aiayn.decoding.drafts import Draft, ModelDraft, NGramDraft, Sampler
from aiayn.decoding.engine import Rows, run
from aiayn.decoding.greedy import TokenRows, argmax
from aiayn.decoding.mask_predict import mask_predict
from aiayn.decoding.prefix import PromptCache
from aiayn.decoding.sampling import pad_is_last, penalties_for, sampled_rows
from aiayn.decoding.source_cache import SourceCache
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.model.transformer import TransformerModel


def generate(model: TransformerModel, src_ids: Tensor, strategy: str | None = None, *,
             config: DecodingConfig | None = None, max_new_tokens: Tensor | int | None = None,
             use_cache: bool = True, draft: Draft | TransformerModel | str | None = None,
             draft_model: TransformerModel | None = None,
             prompt_cache: PromptCache | SourceCache | None = None, draft_tokens: int | None = None,
             speculative_stats: SpeculativeStats | None = None,
             on_token: Callable[[Tensor, Tensor], None] | None = None, candidates: Tensor | None = None,
             grammars: Grammars | None = None, **options) -> list[list[int]]:
    """Generate token ids for each row of ``src_ids``.

    Args:
        src_ids: (B, S) source ids for an encoder-decoder, or the prompts for a decoder-only model,
            right-padded with pad_id (prompts of different lengths are fine).
        strategy, options: ``config`` (default ``DecodingConfig()``) with these fields replaced
            (``beam_size=4``, ``length_penalty=0.6``, ``temperature=0.8``, ...), resolved against the model
            (:meth:`DecodingConfig.resolve`: without a strategy, beam search for a translation model with
            ``beam_size`` > 1, sampling for a language model with ``temperature`` > 0, else greedy).
        max_new_tokens: an int, or a (B,) tensor of per-row limits. An encoder-decoder's limit of a row is
            ``max_len_a * its source length + max_len_b`` (``max_len_b=None``: no such limit), capped by
            ``max_new_tokens``; a decoder-only model's is ``max_new_tokens`` (default 200).
        draft: greedy or sampling: speculative decoding (the same output, or for sampling the same distribution,
            fewer passes of ``model``) drafted by a model
            with the same vocabulary (a smaller one, or ``model``'s own int4 copy:
            ``aiayn.inference.precision.draft_copy``), ``"ngram"`` (prompt lookup), or any
            :class:`~aiayn.decoding.drafts.Draft`; ``draft_tokens`` a pass (None: adapted to the acceptance);
            counts are added to ``speculative_stats`` if given. ``draft_model``: the same, by its older name.
        prompt_cache: decoder-only, one prompt: reuse the stored keys/values of its longest cached prefix (a
            ``PromptCache``); encoder-decoder: a ``SourceCache``, whose sources seen before skip the encoder.
        on_token: greedy and sample: called with the next ids (B,) and which rows are still live (B,), after
            every step (streaming).
        candidates: greedy and beam: (C,) the only token ids that may be generated, a vocabulary shortlist
            (``aiayn.inference.shortlist``): the output projection is cut to their rows and the search runs over
            them only.
        grammars: the tokenizer's grammar compiler (:class:`~aiayn.decoding.constraint.Grammars`), needed when
            the decoding has a ``json_schema`` or ``grammar``.
    Returns:
        B * num_return_sequences lists of generated ids (grouped per input), without BOS and EOS.
    """
    per_row = max_new_tokens if isinstance(max_new_tokens, Tensor) else None
    given = {"strategy": strategy, "max_new_tokens": None if per_row is not None else max_new_tokens}
    cfg = (config or DecodingConfig()).replace(**{k: v for k, v in given.items() if v is not None}, **options)
    cfg = cfg.resolve(model.config)
    model.eval()
    draft = _draft(draft if draft is not None else draft_model, model)
    if candidates is not None and (draft is not None or cfg.strategy == "sample"):
        raise ValueError("candidates: a shortlist is for greedy and beam search, without a draft model")
    if cfg.strategy in PARALLEL:
        if candidates is not None or draft is not None:
            raise ValueError(f"strategy {cfg.strategy}: one translation per input, without a shortlist or a draft")
        if cfg.strategy == "ctc":
            return best_path(model, src_ids, _limits(model, src_ids, cfg, per_row))
        return mask_predict(model, src_ids, cfg.iterations, cfg.length_beam, _limits(model, src_ids, cfg, per_row))
    grammar = _grammar(cfg, grammars)
    if draft is not None:
        return _drafted(model, src_ids, cfg, per_row, on_token, grammar, draft, draft_tokens, speculative_stats,
                        prompt_cache)
    group, inputs, beams = rows_for(model, src_ids, cfg, per_row, on_token, grammar)
    run(model, group, inputs, beams, use_cache, candidates, prompt_cache)
    if cfg.strategy == "beam":
        return [h.tokens for hyps in group.nbest() for h in hyps[:cfg.num_return_sequences]]
    return group.results()


def greedy_search(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int, min_new_tokens: int = 0,
                  use_cache: bool = True, prompt_cache: PromptCache | None = None, on_token=None,
                  candidates: Tensor | None = None) -> list[list[int]]:
    """Arg-max at every step, at most ``max_new_tokens`` per row: :func:`generate` with strategy greedy."""
    return generate(model, src_ids, "greedy", max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                    max_len_b=None, use_cache=use_cache, prompt_cache=prompt_cache, on_token=on_token,
                    candidates=candidates)


def beam_search(model: TransformerModel, src_ids: Tensor, beam_size: int = 4, max_new_tokens: Tensor | int = 64,
                min_new_tokens: int = 0, length_penalty: float = 1.0, use_cache: bool = True,
                candidates: Tensor | None = None) -> list[list[Hypothesis]]:
    """n-best lists (best first, ``beam_size`` each) for every row of ``src_ids``: the beam search of
    :func:`generate`, with its hypotheses' scores. ``max_new_tokens`` may be a (B,) tensor."""
    per_row = torch.as_tensor(max_new_tokens).expand(src_ids.size(0))
    cfg = DecodingConfig(strategy="beam", beam_size=beam_size, min_new_tokens=min_new_tokens, max_len_b=None,
                         length_penalty=length_penalty).resolve(model.config)
    group, inputs, beams = rows_for(model, src_ids, cfg, per_row)
    return run(model, group, inputs, beams, use_cache, candidates).nbest()


def sample(model: TransformerModel, src_ids: Tensor, max_new_tokens: Tensor | int, min_new_tokens: int = 0,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
           num_samples: int = 1, use_cache: bool = True, prompt_cache: PromptCache | None = None,
           on_token=None) -> list[list[int]]:
    """``num_samples`` samples per row of ``src_ids`` (grouped per input): :func:`generate` with strategy sample."""
    return generate(model, src_ids, "sample", max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                    temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, num_return_sequences=num_samples,
                    max_len_b=None, use_cache=use_cache, prompt_cache=prompt_cache, on_token=on_token)


def _drafted(model: TransformerModel, src_ids: Tensor, cfg: DecodingConfig, per_row: Tensor | None, on_token,
             grammar: Grammar | None, draft: Draft, draft_tokens: int | None, stats: SpeculativeStats | None,
             prompt_cache) -> list[list[int]]:
    """Speculative decoding of each input alone, and of each of its samples (seeds ``seed``, ``seed + 1``, ...):
    rows guess only while alone in their batch. Each is the group :func:`rows_for` makes with ``draft``."""
    if not draftable(cfg):
        raise ValueError("draft: speculative decoding is greedy or sampled; use strategy='greedy' or 'sample'")
    n = cfg.num_return_sequences if cfg.strategy == "sample" else 1
    seeds = [None if cfg.seed is None else cfg.seed + k for k in range(n)]
    limits, outputs = _limits(model, src_ids, cfg, per_row), []
    for r in range(src_ids.size(0)):
        for seed in seeds:
            one = cfg.replace(num_return_sequences=1, seed=seed)
            group, inputs, _ = rows_for(model, src_ids[r: r + 1], one, limits[r: r + 1], on_token, grammar, draft,
                                        draft_tokens, stats)
            outputs += run(model, group, inputs, prompt_cache=prompt_cache).results()
    return outputs


def _sampler(model: TransformerModel, cfg: DecodingConfig) -> Sampler | None:
    """How speculative decoding draws: None for greedy."""
    if cfg.strategy == "greedy":
        return None
    generator = torch.Generator()
    generator.manual_seed(cfg.seed if cfg.seed is not None else int(torch.randint(2**62, ()).item()))
    return Sampler(cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p,
                   pad_is_last(model.config, model.config.target_vocab), generator)


def draftable(cfg: DecodingConfig) -> bool:
    """Whether a decoding can be drafted: greedy or sampled (penalties, biases and grammars apply)."""
    return cfg.strategy in ("greedy", "sample")


def _draft(draft: Draft | TransformerModel | str | None, model: TransformerModel) -> Draft | None:
    """A draft as :class:`~aiayn.decoding.drafted.DraftedRows` takes it: ``"ngram"`` is prompt lookup; a model with
    ``model``'s vocabulary drafts as a :class:`~aiayn.decoding.drafts.ModelDraft`."""
    if isinstance(draft, str):
        if draft != "ngram":
            raise ValueError(f"draft: {draft!r} is not a way to draft; give a model, 'ngram' or a Draft")
        return NGramDraft()
    if isinstance(draft, TransformerModel):
        if draft.config.target_vocab != model.config.target_vocab:
            raise ValueError("draft model: its vocabulary must be the main model's")
        return ModelDraft(draft)
    return draft


def _grammar(cfg: DecodingConfig, grammars: Grammars | None) -> Grammar | None:
    if (cfg.json_schema or cfg.grammar) and grammars is None:
        raise ValueError("json_schema: constrained decoding needs the tokenizer's grammars (grammars=Grammars(...))")
    return None if grammars is None else grammars.for_decoding(cfg)


def rows_for(model: TransformerModel, src_ids: Tensor, cfg: DecodingConfig, per_row: Tensor | None = None,
             on_token: Callable[[Tensor, Tensor], None] | None = None,
             grammar: Grammar | None = None, draft: Draft | None = None, draft_tokens: int | None = None,
             stats: SpeculativeStats | None = None) -> tuple[Rows, Tensor, int]:
    """The engine group that decodes ``src_ids`` (B, S) as ``cfg`` (resolved, :meth:`DecodingConfig.resolve`)
    says: ``(group, inputs, beams)`` to :meth:`Engine.admit <aiayn.decoding.engine.Engine.admit>` (sampling n per
    input repeats each input n times; beam search makes each input stand for ``beam_size`` rows). ``per_row``:
    (B,) limits replacing ``cfg.max_new_tokens``; ``grammar``: every row's tokens follow it; ``draft``: a decoding
    that can be drafted (:func:`draftable`) is, ``draft_tokens`` a pass (None: adapted), its counts added to
    ``stats``. The library's
    :func:`generate` and the server both build their groups here."""
    cfg = cfg.resolve(model.config)  # as it is when resolved already
    limits, eos, pad = _limits(model, src_ids, cfg, per_row), model.config.eos_id, model.config.pad_id
    vocab = model.config.target_vocab
    if draft is not None and draftable(cfg):
        n = cfg.num_return_sequences if cfg.strategy == "sample" else 1
        rows, limits = src_ids.repeat_interleave(n, dim=0), limits.repeat_interleave(n)  # (B*n, S), (B*n,)
        penalties = penalties_for(cfg, _decoded(model, rows), pad, vocab)
        constraints = None if grammar is None else [grammar.row() for _ in range(rows.size(0))]
        return DraftedRows(limits, draft, rows, model.config, _sampler(model, cfg), draft_tokens, cfg.min_new_tokens,
                           on_token, stats, penalties, constraints), rows, 1
    if cfg.strategy in PARALLEL:
        raise ValueError(f"strategy {cfg.strategy}: decodes every position at once, not token by token; use "
                         "generate")
    if cfg.strategy == "greedy":
        constraints = None if grammar is None else [grammar.row() for _ in range(src_ids.size(0))]
        penalties = penalties_for(cfg, _decoded(model, src_ids), pad, vocab)
        return TokenRows(limits, argmax, eos, pad, cfg.min_new_tokens, on_token, constraints, penalties), src_ids, 1
    if cfg.strategy == "beam":
        if cfg.num_return_sequences > cfg.beam_size:
            raise ValueError(f"num_return_sequences: at most beam_size={cfg.beam_size} for beam search")
        return BeamRows(limits.tolist(), cfg.beam_size, eos, cfg.min_new_tokens, cfg.length_penalty), src_ids, \
            cfg.beam_size
    n = cfg.num_return_sequences
    constraints = None if grammar is None else [grammar.row() for _ in range(src_ids.size(0) * n)]
    prompts = src_ids.repeat_interleave(n, dim=0)  # (B*n, S)
    penalties = penalties_for(cfg, _decoded(model, prompts), pad, vocab)
    group = sampled_rows(model, limits.repeat_interleave(n), cfg.min_new_tokens, cfg.temperature, cfg.top_k,
                         cfg.top_p, cfg.seed, on_token, constraints, cfg.min_p, penalties)
    return group, prompts, 1


def _decoded(model: TransformerModel, src_ids: Tensor) -> Tensor:
    """The rows' tokens the penalties see before the output: a language model's prompts (B, S); none for a
    translation model, whose source is another vocabulary (B, 0)."""
    return src_ids[:, :0] if model.config.arch == "encoder-decoder" else src_ids


def _limits(model: TransformerModel, src_ids: Tensor, cfg: DecodingConfig, per_row: Tensor | None) -> Tensor:
    """New tokens allowed per row (B,): relative to the source for translation, else a fixed number."""
    cap = per_row if per_row is not None else cfg.max_new_tokens
    if model.config.arch == "encoder-decoder":
        return length_limits(src_ids, model.config.pad_id, cap, cfg.max_len_a, cfg.max_len_b)
    return length_limits(src_ids, model.config.pad_id, TEXT_MAX_NEW_TOKENS if cap is None else cap)


def speculative_greedy(model: TransformerModel, draft: Draft | TransformerModel, src_ids: Tensor,
                       max_new_tokens: Tensor | int, k: int | None = None, min_new_tokens: int = 0,
                       stats: SpeculativeStats | None = None,
                       on_token: Callable[[Tensor, Tensor], None] | None = None
                       ) -> tuple[list[list[int]], SpeculativeStats]:
    """Greedy outputs of ``model`` for each row of ``src_ids``, drafted by ``draft`` (``k`` tokens a pass; None:
    adapted), at most ``max_new_tokens`` (an int or (B,)): :func:`generate` with a draft; and the counts."""
    stats = stats if stats is not None else SpeculativeStats()
    outputs = generate(model, src_ids, "greedy", max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                       max_len_b=None, draft=draft, draft_tokens=k, speculative_stats=stats, on_token=on_token)
    return outputs, stats
