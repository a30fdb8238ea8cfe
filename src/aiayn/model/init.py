"""Documented initialisation.

- Every linear weight: Xavier/Glorot uniform (as in the paper's released tensor2tensor code); biases 0.
- Token embeddings: N(0, d_model^-0.5), so that after the x sqrt(d_model) scale (section 3.4) they have
  unit variance, the same scale as the sinusoidal positions; a tied output projection shares them.
- Learned positions: N(0, 0.02). LayerNorm: weight 1, bias 0.
"""

from __future__ import annotations

import contextlib

from torch import nn

from aiayn.model.embeddings import TokenEmbedding
from aiayn.model.positions import LearnedPositions


def init_weights(model: nn.Module) -> None:
    """Initialise ``model`` in place as documented above (tied weights end with the embedding's init)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    for module in model.modules():  # after the linears, so a tied output weight keeps this init
        if isinstance(module, TokenEmbedding):
            nn.init.normal_(module.weight, mean=0.0, std=module.embedding_dim ** -0.5)
        elif isinstance(module, LearnedPositions):
            nn.init.normal_(module.table.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


SKIPPED = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_")  # what torch's layers and init_weights call


@contextlib.contextmanager
def uninitialised():
    """Layers built inside leave their weights as allocated (``torch.nn.init`` does nothing), for a model whose
    every weight is read from a checkpoint next: no time spent drawing them, and no memory touched before the
    stored values arrive (as Hugging Face builds a model it loads). Not for a model that will train as built."""
    saved = {name: getattr(nn.init, name) for name in SKIPPED}
    try:
        for name in SKIPPED:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)
