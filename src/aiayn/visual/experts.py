"""Which experts each token goes to, in a mixture-of-experts language model (``model/experts.py``): the router's
choices on one text, layer by layer, the load each expert takes, and a picture of both (``aiayn show experts``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from aiayn.model.experts import MixtureOfExperts
from aiayn.visual.figures import pyplot, save_figure


@dataclass
class Routes:
    """The router's choices on one text. ``weights``: (L, T, E), each token's weight on each expert in each mixture
    layer (0 where the expert was not chosen: ``k`` non-zero a row)."""

    tokens: list[str]
    weights: Tensor

    @property
    def load(self) -> Tensor:
        """(L, E): the tokens each expert took, per layer."""
        return (self.weights > 0).sum(dim=1)

    def format(self) -> str:
        """One line a layer: each expert's tokens, and the busiest expert's share."""
        lines = [f"{len(self.tokens)} tokens, {self.weights.size(2)} experts, "
                 f"{int((self.weights[0, 0] > 0).sum())} a token"]
        for layer, counts in enumerate(self.load.tolist()):
            share = max(counts) / max(sum(counts), 1)
            lines.append(f"layer {layer + 1}: tokens per expert {counts} (busiest {share:.0%} of the choices)")
        return "\n".join(lines) + "\n"


@torch.no_grad()
def routes_for(model, tokenizer, text: str | list[int]) -> Routes:
    """The router choices of a decoder-only ``model`` with experts over ``text`` (or its ids)."""
    ids = (tokenizer.encode(text) if isinstance(text, str) else text)[-model.config.max_len:]
    if not ids:
        raise ValueError("text: empty; give the text whose routing to draw")
    layers = [m for m in model.modules() if isinstance(m, MixtureOfExperts)]
    if not layers:
        raise ValueError("checkpoint: this model has no experts (n_experts is 0)")
    found: list[Tensor] = []

    def keep(moe: MixtureOfExperts, inputs: tuple[Tensor], _) -> None:
        x = inputs[0].reshape(-1, inputs[0].size(-1))  # (T, D)
        chosen, weights = moe.route(x)  # (T, k) each
        found.append(torch.zeros(x.size(0), moe.router.out_features).scatter(1, chosen.cpu(), weights.cpu()))

    hooks = [moe.register_forward_hook(keep) for moe in layers]
    try:
        model.eval()(torch.tensor([ids], device=next(model.parameters()).device))
    finally:
        for hook in hooks:
            hook.remove()
    return Routes(tokenizer.pieces(ids), torch.stack(found))  # (L, T, E)


def plot_routes(routes: Routes, output: str | Path) -> Path:
    """Per layer, a heatmap of the router's weights (experts x tokens) beside a bar of each expert's load."""
    plt = pyplot()
    n_layers, n_tokens, n_experts = routes.weights.shape
    fig, axes = plt.subplots(n_layers, 2, figsize=(4 + 0.25 * n_tokens, 1 + 0.25 * n_experts * n_layers),
                             squeeze=False, layout="constrained", width_ratios=[max(n_tokens, 4), 4])
    for layer, (heat, bars) in enumerate(axes):
        image = heat.imshow(routes.weights[layer].T.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        heat.set_yticks(range(n_experts), [str(e) for e in range(n_experts)], fontsize=7)
        heat.set_xticks(range(n_tokens), routes.tokens if layer == n_layers - 1 else [], rotation=90, fontsize=7)
        heat.set_ylabel(f"layer {layer + 1}\nexpert")
        bars.barh(range(n_experts), routes.load[layer].numpy())
        bars.set_ylim(n_experts - 0.5, -0.5)
        bars.set_yticks([])
        bars.set_xlabel("tokens" if layer == n_layers - 1 else "")
    axes[0, 0].set_title("router weight of each token on each expert (0: not chosen)")
    axes[0, 1].set_title("load")
    fig.colorbar(image, ax=axes[:, 0], shrink=0.6)
    return save_figure(fig, output)
