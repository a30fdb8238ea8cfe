"""Sampling: temperature, top-k, top-p (nucleus) and min-p filtering, with a seeded generator; and the penalties
on tokens already seen (repetition, frequency, presence) that greedy search and sampling share."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.decoding.greedy import TokenRows
from aiayn.model.masks import prompt_lengths
from aiayn.model.transformer import TransformerModel


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                  min_p: float = 0.0) -> Tensor:
    """Scale by 1/temperature, keep the ``top_k`` best (0 = all), the smallest set whose probability
    reaches ``top_p``, and the tokens at least ``min_p`` times as likely as the likeliest (Hugging Face's order);
    everything else becomes -inf. (B, V) -> (B, V)."""
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1], got {top_p}")
    logits = _scaled(logits, temperature)
    if 0 < top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    if min_p > 0.0:
        probs = logits.softmax(dim=-1)  # (B, V)
        logits = logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    return logits


def _scaled(logits: Tensor, temperature: float) -> Tensor:
    """``logits / temperature``; where a temperature below 1 is so small that a finite score overflows, its limit:
    the likeliest tokens alone (0), every other -inf."""
    scaled = logits / temperature
    if temperature < 1 and torch.isinf(logits.nan_to_num(0.0, 0.0, 0.0).abs().amax() / temperature):
        best = logits.max(dim=-1, keepdim=True).values  # (B, 1)
        scaled = torch.zeros_like(logits).masked_fill(logits < best, float("-inf"))
    return scaled


def top_p_filter(logits: Tensor, top_p: float, ranks: tuple[int, ...] = (64, 1024)) -> Tensor:
    """The nucleus (Holtzman et al., 2020): the smallest set of the likeliest tokens whose probability reaches
    ``top_p`` kept, every other score -inf. (B, V) -> (B, V). Sorting the whole vocabulary (:func:`top_p_sorted`,
    the reference) is most of a draw's time, and a nucleus is mostly a few tokens: the likeliest ``ranks[0]`` are
    ranked alone (``topk``), then ``ranks[1]``, until their mass reaches ``top_p`` in every row (the nucleus is then
    among them); past those, the whole vocabulary is sorted."""
    probs = logits.softmax(dim=-1)  # (B, V)
    for k in ranks:
        if k >= probs.size(-1):
            break
        ranked, order = probs.topk(k, dim=-1)  # (B, k), likeliest first
        if bool((ranked.cumsum(dim=-1)[:, -1] >= top_p).all()):  # as _nucleus sums them
            return _nucleus(logits, ranked, order, top_p)
    return top_p_sorted(logits, top_p)


def top_p_sorted(logits: Tensor, top_p: float) -> Tensor:
    """:func:`top_p_filter` by sorting the whole vocabulary: the reference it is tested against."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
    return _nucleus(logits, sorted_logits.softmax(dim=-1), order, top_p)


def _nucleus(logits: Tensor, ranked: Tensor, order: Tensor, top_p: float) -> Tensor:
    """``logits`` (B, V) with every token outside the nucleus at -inf, from the probabilities of the likeliest
    tokens ``ranked`` (B, k), likeliest first, and their columns ``order`` (B, k)."""
    drop = ranked.cumsum(dim=-1) - ranked >= top_p  # the probability mass ranked above each token reaches top_p
    drop[..., 0] = False  # the likeliest token is always kept (a top_p that rounds to 0 included)
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, ~drop)  # (B, V)
    return logits.masked_fill(~keep, float("-inf"))


FEW = 8  # a draw over the tokens left is taken where at most 1/FEW of the columns are left (draw)


def draw(logits: Tensor, generator: torch.Generator, temperature: float = 1.0, top_k: int = 0,
         top_p: float = 1.0, pad_last: bool = False, min_p: float = 0.0) -> Tensor:
    """One token per row of (B, V) logits, drawn from the filtered softmax with ``generator``: (B,) ids.

    A draw takes one random number per column it draws over (``torch.multinomial``: Gumbel-style, an exponential
    number per column), about 1 ms for 49,152 columns on a CPU core, beside a decoding step of a few. Where the
    filters (or forbidden tokens) leave at most 1/``FEW`` of the columns, it draws over those alone: the same
    distribution, in microseconds. Elsewhere it draws over every column, as Hugging Face's ``generate()`` does, so
    that a seed draws what it draws. ``pad_last``: the last column is a padding row aiayn appended to an imported
    vocabulary (never generated); it takes no part in the draw (the checkpoint's own vocabulary, as there)."""
    if pad_last:
        logits = logits[:, :-1]  # (B, V - 1)
    logits = filter_logits(logits, temperature, top_k, top_p, min_p)  # (B, V), -inf where filtered out
    left = int(torch.isfinite(logits).sum(dim=-1).max())
    if left * FEW > logits.size(-1):
        return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)
    scores, columns = logits.topk(max(left, 1), dim=-1)  # (B, n): every row's tokens left (-inf after its own)
    picked = torch.multinomial(scores.softmax(dim=-1), 1, generator=generator)  # (B, 1)
    return columns.gather(-1, picked).squeeze(1)


def pad_is_last(cfg, width: int) -> bool:
    """Whether scores of ``width`` columns end with the padding row of an imported vocabulary (``padding_row``)."""
    return cfg.padding_row and width == cfg.target_vocab


class Penalties:
    """Move the scores of chosen tokens and lower those of tokens a row has seen (vLLM's and OpenAI's order): first
    ``bias`` is added (OpenAI's ``logit_bias``); then a score of a token in the prompt or the output is divided by
    ``repetition`` when positive, multiplied when negative (CTRL, as Hugging Face and vLLM do); ``frequency`` is
    taken off once per time the row generated the token, ``presence`` once if it did.

    Args:
        prompts: (B, S) the rows' prompts, right-padded with ``pad_id`` (``masks.prompt_lengths``: not counted).
        vocab: the number of score columns (V).
        bias: token id -> what is added to its score, every row and step.
    """

    def __init__(self, prompts: Tensor, pad_id: int, vocab: int, repetition: float = 1.0, frequency: float = 0.0,
                 presence: float = 0.0, bias: dict[int, float] | None = None) -> None:
        self.repetition, self.frequency, self.presence = repetition, frequency, presence
        self.bias = None
        if bias:
            self.bias = torch.zeros(vocab, device=prompts.device)  # (V,)
            ids = torch.tensor(list(bias), device=prompts.device)  # (n,)
            self.bias[ids] = torch.tensor(list(bias.values()), device=prompts.device)
        ids = prompts.clamp(0, vocab - 1)  # (B, S)
        self.seen = torch.zeros(prompts.size(0), vocab, dtype=torch.bool, device=prompts.device)  # (B, V)
        real = torch.arange(prompts.size(1), device=prompts.device) < prompt_lengths(prompts, pad_id)[:, None]
        rows = torch.arange(prompts.size(0), device=prompts.device)[:, None].expand_as(ids)  # (B, S)
        self.seen[rows[real], ids[real]] = True  # (B, V): a pad id inside a prompt is a token it has seen
        self.counts = torch.zeros(prompts.size(0), vocab, device=prompts.device)  # (B, V) output counts

    def apply(self, scores: Tensor, candidates: Tensor | None = None) -> Tensor:
        """Penalised scores (B, V), or (B, C) for a shortlist's ``candidates`` (C,)."""
        seen, counts, bias = self.seen, self.counts, self.bias
        if candidates is not None:
            seen, counts = seen[:, candidates], counts[:, candidates]  # (B, C)
            bias = None if bias is None else bias[candidates]  # (C,)
        return self._penalised(scores, seen, counts, bias)

    def along(self, row: int, scores: Tensor, tokens: list[int]) -> Tensor:
        """Row ``row``'s scores (n + 1, V) after each token of a drafted run ``tokens`` (n) and before the first,
        each penalised as if the row had taken the drafted tokens before it (speculative decoding: a position is
        looked at only when those were kept)."""
        steps = torch.zeros(len(tokens) + 1, self.counts.size(1), device=scores.device)  # (n + 1, V)
        steps[torch.arange(1, len(tokens) + 1), torch.tensor(tokens, dtype=torch.long)] = 1
        return self._penalised(scores, self.seen[row: row + 1], self.counts[row] + steps.cumsum(0), self.bias)

    def _penalised(self, scores: Tensor, seen: Tensor, counts: Tensor, bias: Tensor | None) -> Tensor:
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        if self.repetition != 1.0:
            hit = seen | (counts > 0)
            scaled = torch.where(scores > 0, scores / self.repetition, scores * self.repetition)
            scaled = scaled.clamp(max=torch.finfo(scores.dtype).max)  # a penalty near 0 overflows no score to inf
            scores = torch.where(hit, scaled, scores)
        return scores - self.frequency * counts - self.presence * (counts > 0).float()

    def take(self, tokens: Tensor, live: Tensor) -> None:
        """Count each live row's new token (B,)."""
        rows = live.nonzero().flatten()
        self.counts[rows, tokens[rows]] += 1

    def take_run(self, row: int, tokens: list[int]) -> None:
        """Count row ``row``'s new tokens, several at once (a drafted run kept)."""
        for token in tokens:
            self.counts[row, token] += 1


def penalties_for(cfg, prompts: Tensor, pad_id: int, vocab: int) -> Penalties | None:
    """The :class:`Penalties` a decoding config (``DecodingConfig``) asks for (its penalties and ``logit_bias``),
    None when it asks for none."""
    bias = cfg.biases()
    if not cfg.penalized and not bias:
        return None
    return Penalties(prompts, pad_id, vocab, cfg.repetition_penalty, cfg.frequency_penalty, cfg.presence_penalty,
                     bias)


def sampled_rows(model: TransformerModel, limits: Tensor, min_new_tokens: int = 0, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None, on_token=None,
                 constraints: list | None = None, min_p: float = 0.0,
                 penalties: Penalties | None = None) -> TokenRows:
    """Rows (limits (B,)) that each draw their next token with one generator seeded by ``seed`` (random when
    None): the engine group of sampling."""
    gen = torch.Generator(device=limits.device)
    gen.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))

    def choose(scores: Tensor) -> Tensor:
        return draw(scores, gen, temperature, top_k, top_p, pad_is_last(model.config, scores.size(-1)), min_p)

    cfg = model.config
    return TokenRows(limits, choose, cfg.eos_id, cfg.pad_id, min_new_tokens, on_token, constraints, penalties)
