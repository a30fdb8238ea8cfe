"""The mixture of experts: the batched, grouped-by-expert forward equals the routing written out token by token,
and it fits the one model as an option (parameter count, a cached step equal to the whole pass)."""

import pytest
import torch

from aiayn import build_model, count_parameters
from aiayn.model.experts import MixtureOfExperts

from conftest import tiny


def reference(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """Each token alone: softmax over the experts, its k best, each expert's SwiGLU, the weighted sum."""
    out = torch.zeros_like(x)
    for n, token in enumerate(x):
        probs = moe.router(token).softmax(-1)
        weights, chosen = probs.topk(moe.top_k)
        if moe.renorm:
            weights = weights / weights.sum()
        for w, e in zip(weights, chosen.tolist(), strict=True):
            gate, up = (moe.gate_up[e] @ token).chunk(2)
            out[n] += w * (moe.down[e] @ (torch.nn.functional.silu(gate) * up))
    return out


@pytest.mark.parametrize("top_k, renorm", [(1, True), (2, True), (2, False), (4, False)])
def test_the_batched_experts_equal_the_routing_written_out(top_k, renorm):
    torch.manual_seed(0)
    moe = MixtureOfExperts(16, 24, n_experts=4, top_k=top_k, renorm=renorm).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        expected = reference(moe, x.reshape(-1, 16)).view(2, 9, 16)
        assert torch.allclose(moe(x), expected, atol=1e-6)  # the router's softmax runs in float32, as HF's


def test_experts_are_an_option_of_the_one_model():
    cfg = tiny(arch="decoder-only", feed_forward="swiglu", activation="silu", n_experts=4, experts_per_token=2,
               expert_d_ff=24)
    model = build_model(cfg).eval()
    assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)
    ids = torch.randint(5, 40, (2, 8))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2, 8, full)
        steps = torch.cat([model.decode(ids[:, t:t + 1], cache) for t in range(8)], dim=1)
    assert (full - steps).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="n_experts"):
        tiny(arch="decoder-only", n_experts=4)  # the paper's feed-forward: no experts of it


def test_split_experts_are_linear_layers_that_inference_copies_pack_and_quantize(bf16_kernels):
    """An inference copy splits each expert into two linear layers: the same outputs, and --int8 / --int4 / packing
    reach the experts (the most weights a mixture has) as any other layer."""
    import copy

    from aiayn.inference.precision import inference_copy
    from aiayn.model.quantized import Int4Linear, Int8Linear

    torch.manual_seed(0)
    cfg = tiny(arch="decoder-only", feed_forward="swiglu", activation="silu", n_experts=4, experts_per_token=2,
               expert_d_ff=64, d_model=64, n_heads=4)
    model = build_model(cfg).eval()
    ids = torch.randint(5, 40, (2, 8))
    with torch.no_grad():
        full = model(ids)
        split = copy.deepcopy(model)
        split.decoder.layers[0].ffn.split()
        assert torch.allclose(split(ids), full, atol=1e-6)
        for kind, layer in (("int8", Int8Linear), ("int4", Int4Linear)):
            quantized = inference_copy(model, **{kind: True})
            experts = quantized.decoder.layers[1].ffn.experts
            assert all(isinstance(part, layer) for pair in experts for part in pair), kind
            error = (quantized(ids) - full).abs().max() / full.abs().max()
            bound = {"int4": 0.15, "int8": 0.02 if bf16_kernels else 0.05}[kind]  # int8 activations round more
            assert 0 < error < bound, (kind, error)
            assert type(quantized.decoder.layers[1].ffn.router) is torch.nn.Linear  # the routing as trained


def test_lora_adapts_a_mixtures_attention_and_leaves_its_experts_frozen():
    """LoRA on a mixture adapts the attention projections (PEFT's q/k/v/o names); the experts and the router are
    not linear layers LoRA wraps, and stay frozen."""
    from aiayn.model.lora import apply_lora

    cfg = tiny(arch="decoder-only", feed_forward="swiglu", activation="silu", n_experts=4, experts_per_token=2,
               expert_d_ff=24)
    model = build_model(cfg)
    wrapped = apply_lora(model, r=4, alpha=8, targets="q,k,v,o,ffn")
    assert len(wrapped) == 4 * cfg.n_decoder_layers and all(".self_attn." in name for name in wrapped)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in name for name in trainable)
