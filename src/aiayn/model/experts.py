"""A mixture of experts in place of the feed-forward network (Mixtral, Qwen3-MoE, OLMoE): a router scores every
expert for each token, the token's ``top_k`` best experts (gated feed-forward networks, SwiGLU) run on it, and
their outputs are summed, weighted by the router's softmax probabilities (renormalised over the chosen ones where
the model says so). Each token pays for k experts' weights while the model holds all of them.

The experts' weights are batched, ``gate_up`` (E, 2F, D) and ``down`` (E, D, F); tokens are grouped by expert, so
the loop runs over the experts a batch uses, never over its tokens.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.layers import ACTIVATIONS


class MixtureOfExperts(nn.Module):
    """Top-k routed SwiGLU experts. (..., D) -> (..., D).

    Args:
        d_model: D; d_ff: each expert's hidden size F; n_experts: E; top_k: experts per token.
        renorm: the chosen experts' probabilities divided by their sum (Mixtral; Qwen3-MoE's ``norm_topk_prob``).
        activation: the gate's activation (SiLU for SwiGLU).
    """

    def __init__(self, d_model: int = 512, d_ff: int = 2048, n_experts: int = 8, top_k: int = 2,
                 renorm: bool = True, activation: str = "silu") -> None:
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.gate_up = nn.Parameter(torch.randn(n_experts, 2 * d_ff, d_model) * d_model ** -0.5)  # (E, 2F, D)
        self.down = nn.Parameter(torch.randn(n_experts, d_model, d_ff) * d_ff ** -0.5)  # (E, D, F)
        self.top_k, self.renorm, self.activation = top_k, renorm, ACTIVATIONS[activation]
        self.experts: nn.ModuleList | None = None  # after split(): per expert, its gate_up and down as linear layers

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Each token's chosen experts and their weights: (N, k) ids and (N, k) float32 weights, x (N, D)."""
        probs = self.router(x).float().softmax(dim=-1)  # (N, E)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (N, k), best first
        if self.renorm:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.size(-1))  # (N, D)
        chosen, weights = self.route(flat)
        order = chosen.flatten().argsort(stable=True)  # (N*k,): the (token, slot) pairs grouped by expert
        tokens, slot_weights = order // self.top_k, weights.flatten()[order]  # (N*k,) each, in that order
        counts = torch.bincount(chosen.flatten(), minlength=self.router.out_features).tolist()
        out = torch.zeros_like(flat)
        start = 0
        for expert, n in enumerate(counts):
            if n:
                rows, w = tokens[start:start + n], slot_weights[start:start + n]
                gate_up, down = self._parts(expert)
                gate, up = gate_up(flat[rows]).chunk(2, dim=-1)  # (n, F) each
                y = down(self.activation(gate) * up)  # (n, D)
                out.index_add_(0, rows, y * w[:, None].to(y.dtype))
                start += n
        return out.view(x.shape)

    def _parts(self, expert: int) -> tuple:
        """The expert's gate_up and down products: slices of the batched weights, or its own layers once split."""
        if self.experts is not None:
            return tuple(self.experts[expert])
        return partial(F.linear, weight=self.gate_up[expert]), partial(F.linear, weight=self.down[expert])

    def split(self) -> MixtureOfExperts:
        """In place, for an inference copy: each expert's weights become two ``nn.Linear`` layers, which packing and
        weight-only int8/int4 (``inference/precision.py``) turn into their kernels' layers as any other."""
        if self.experts is None:
            layers = []
            for gate_up, down in zip(self.gate_up.detach(), self.down.detach(), strict=True):
                pair = nn.ModuleList(nn.Linear(*w.shape[::-1], bias=False, device="meta") for w in (gate_up, down))
                for layer, w in zip(pair, (gate_up, down), strict=True):
                    layer.weight = nn.Parameter(w, requires_grad=False)  # (F', D'): a view, no second copy
                layers.append(pair)
            self.experts = nn.ModuleList(layers)
            del self.gate_up, self.down
        return self
