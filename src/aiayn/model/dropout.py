"""Residual dropout (section 5.4) with a cheaper mask on CPU.

On CPU, ``torch.nn.Dropout`` draws its mask with ``bernoulli_``: one call of the generator per element, a
quarter of a training step of the Multi30k recipes in a profile (docs/translation-results.md, "Dropout's mask on CPU";
``benchmarks/bench_dropout.py`` measures the gain). :class:`Dropout` draws
64 random bits at a time from the same generator and cuts them into four 16-bit uniforms, so an element is
dropped with probability ``round(p * 65536) / 65536`` (``p`` to within 1e-5) and the survivors are scaled by
``1 / (1 - p)``, as in ``nn.Dropout``. Elsewhere (CUDA, whose dropout is fused) and in eval mode it is
``nn.Dropout`` itself.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LANES = 4  # int16 uniforms in one int64 draw
_LEVELS = 1 << 16  # values of one int16 uniform


def keep_mask(shape: torch.Size, p: float) -> Tensor:
    """A bool mask of ``shape``, each element True (kept) with probability 1 - round(p * 65536) / 65536,
    independent of the others; drawn from torch's default CPU generator (``torch.manual_seed`` fixes it)."""
    n = shape.numel()
    draws = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + _LANES - 1) // _LANES,), dtype=torch.int64)
    uniform = draws.view(torch.int16)[:n]  # (n,): uniform over -32768..32767
    return (uniform >= round(p * _LEVELS) - _LEVELS // 2).view(shape)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with :func:`keep_mask` on CPU in training mode.

    Args:
        p: probability of an element being zeroed.
    Shape: any; the output has the input's shape and dtype.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x  # what nn.Dropout returns then, without its call (decoding runs hundreds a token)
        if x.device.type != "cpu" or self.inplace:
            return super().forward(x)
        if self.p == 1.0:
            return x * 0.0
        scaled = keep_mask(x.shape, self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))  # 0 or 1/(1-p); backward's mask
        return x * scaled
