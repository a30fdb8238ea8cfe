"""``aiayn show experts``: a mixture-of-experts language model (trained here, a few steps) routes each token of a
text to k experts per layer; the load per expert adds up to tokens x k; the picture is drawn; a model without
experts is refused in one line."""

import pytest
import torch

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.visual.experts import routes_for

from conftest import train_family

MOE = {"dropout": 0.0, "norm": "pre", "feed_forward": "swiglu", "activation": "silu", "n_experts": 4,
       "experts_per_token": 2, "expert_d_ff": 32}


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    return train_family(tmp_path_factory.mktemp("moe"), "lm", tokenizer_type="char", model=MOE, max_steps=30,
                        eval_every=30)


def test_each_token_goes_to_k_experts_with_weights_summing_to_one(moe_run):
    model, tokenizers = load_checkpoint(moe_run)
    routes = routes_for(model, tokenizers.src, "the cat sat")
    n = len(tokenizers.src.encode("the cat sat"))
    assert routes.weights.shape == (model.config.n_decoder_layers, n, 4)
    assert ((routes.weights > 0).sum(dim=-1) == 2).all()
    assert torch.allclose(routes.weights.sum(dim=-1), torch.ones(routes.weights.shape[:2]))  # renormalised
    assert routes.load.sum(dim=-1).tolist() == [2 * n] * model.config.n_decoder_layers


def test_show_experts_prints_the_load_and_draws_it(moe_run, tmp_path, capsys):
    out = tmp_path / "experts.png"
    assert main(["show", "experts", "--checkpoint", str(moe_run), "the cat sat", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "layer 1: tokens per expert" in printed and out.stat().st_size > 10_000


def test_a_model_without_experts_is_refused_in_one_line(lm_run, tmp_path, capsys):
    assert main(["show", "experts", "--checkpoint", str(lm_run), "hello", "--output", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "has no experts" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()


def test_the_attention_route_gives_a_token_row_with_its_experts(moe_run):
    """POST /attention with ``row`` on a mixture: the router's weights of that token, layer by layer (what the
    chat page shows when a reply's token is clicked)."""
    from fastapi.testclient import TestClient

    from aiayn.inference.generator import TextGenerator
    from aiayn.serve.limits import Limits
    from aiayn.serve.server import create_app

    generator = TextGenerator.from_checkpoint(moe_run)
    ids = generator.tokenizer.encode("the cat sat")
    with TestClient(create_app(generator, Limits())) as client:
        answer = client.post("/attention", json={"ids": ids, "row": 3}).json()
    routes = routes_for(generator.model, generator.tokenizer, ids)
    assert answer["experts"] == routes.weights[:, 3].round(decimals=4).tolist()
    assert all(sum(w > 0 for w in layer) == 2 for layer in answer["experts"])
