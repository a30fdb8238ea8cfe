"""Attention masks. One convention everywhere: bool, True = may attend (as in F.scaled_dot_product_attention).

Shape legend: B batch, H heads, T query length, S key length.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """True at real tokens, False at padding. (B, S) -> (B, S) bool."""
    return ids != pad_id


def key_mask(mask: Tensor) -> Tensor:
    """A (B, S) token mask as keys every query may see: (B, 1, 1, S) bool."""
    return mask[:, None, None, :]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | None = None,
                window: int | None = None) -> Tensor:
    """Query i (at absolute position k_len - q_len + i) may attend keys j <= its position, and with a
    sliding ``window`` only the last ``window`` of them (j > position - window, itself included).

    Returns a (T, S) bool mask; with a cache, the T new queries come after S - T cached keys.
    """
    k_len = q_len if k_len is None else k_len
    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (T, 1)
    k_pos = torch.arange(k_len, device=device)[None, :]  # (1, S)
    if window is None:
        return k_pos <= q_pos
    return (k_pos <= q_pos) & (k_pos > q_pos - window)


def decoder_self_mask(tgt_mask: Tensor | None, q_len: int, k_len: int, device: torch.device,
                      window: int | None = None) -> Tensor | None:
    """Causal mask (with a sliding ``window``, if given), combined with the target's key padding when given:
    (B or 1, 1, T, S) bool.

    None (attend everywhere) for one newest query without padding that may see every key.
    """
    if tgt_mask is None and q_len == 1 and (window is None or k_len <= window):
        return None
    mask = causal_mask(q_len, k_len, device, window)[None, None]  # (1, 1, T, S)
    if tgt_mask is not None:
        mask = mask & key_mask(tgt_mask)  # (B, 1, T, S)
    return mask


def prompt_lengths(ids: Tensor, pad_id: int) -> Tensor:
    """The real tokens of each right-padded prompt (B, T) -> (B,) long: a lone prompt is all real; in a batch,
    a row's padding is the run of ``pad_id`` that ends it. A pad id anywhere else is a token like any other (a
    language model's pad id may be a word of its vocabulary: Gemma's ``<pad>``)."""
    if ids.size(0) == 1:
        return torch.full((1,), ids.size(1), dtype=torch.long, device=ids.device)
    real = (ids != pad_id).long()  # (B, T)
    cols = torch.arange(1, ids.size(1) + 1, device=ids.device)  # (T,)
    return (real * cols).amax(dim=1)  # (B,): one past each row's last token that is not padding


def left_align(ids: Tensor, pad_id: int) -> tuple[Tensor, Tensor | None]:
    """Right-padded rows (B, T) -> the same rows left-padded, and the padding per row (B,).

    The padding (:func:`prompt_lengths`) is None when no row has any (then ``ids`` comes back unchanged). Every
    row needs at least one token.
    """
    lengths = prompt_lengths(ids, pad_id)  # (B,)
    if bool((lengths == 0).any()):
        row = int((lengths == 0).nonzero()[0])
        raise ValueError(f"prompt: row {row} has no tokens; give every prompt at least one")
    left_pad = ids.size(1) - lengths  # (B,)
    if not bool(left_pad.any()):
        return ids, None
    cols = torch.arange(ids.size(1), device=ids.device)  # (T,)
    source_col = (cols[None, :] - left_pad[:, None]) % ids.size(1)  # (B, T): rotate each row right
    return ids.gather(1, source_col), left_pad


def decoder_inputs(ids: Tensor, pad_id: int | None, offset: int | None, left_pad: Tensor | None = None,
                   window: int | None = None, first_is_real: bool = False, local_window: int | None = None
                   ) -> tuple[Tensor | None, Tensor | None, Tensor | int]:
    """The causal self-attention mask and the positions of a decoder's input ids (B, T), for both decoders.

    Args:
        offset: the cache's position (the T ids come after ``offset`` cached ones); None without a cache.
        left_pad: (B,) the first ``left_pad[b]`` columns of row b are padding (never attended to) and its real
            tokens start at position 0 (rows that joined a running batch later); without it and without a cache,
            right padding (``pad_id``) is masked (``first_is_real``: the first column never is: Marian starts
            from the pad id); ``pad_id`` None: no token is padding by its value (a language model: its causal mask
            keeps right padding from every real token, and a pad id inside a text is a token).
        window: every layer's sliding window (Mistral); local_window: the window of the sliding layers alone
            (Gemma's), whose mask is made beside the others'.
    Returns:
        the mask (B or 1, 1, T, offset + T) bool, True = may attend, or None; the sliding layers' mask (None
        without ``local_window``); the positions: an int (column 0's, every row's) or (B,) per row.
    """
    start, t = offset or 0, ids.size(1)
    if left_pad is not None:
        keys = torch.arange(start + t, device=ids.device) >= left_pad[:, None]  # (B, offset+T)
        positions = start - left_pad  # (B,) per-row position of column ``offset``
    else:
        keys, positions = None, start
        if offset is None and pad_id is not None:
            keys = padding_mask(ids, pad_id)  # (B, T)
            if first_is_real:
                keys[:, 0] = True
    local = None if local_window is None else decoder_self_mask(keys, t, start + t, ids.device, local_window)
    return decoder_self_mask(keys, t, start + t, ids.device, window), local, positions
