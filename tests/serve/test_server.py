"""The front door (serve/server.py): the checkpoint is read once and handed to the product that serves it, so the
weights are held once; the model kind picks its rooms from one table."""

import pytest
from fastapi.testclient import TestClient

from aiayn.inference import load
from aiayn.serve import server
from aiayn.serve.limits import Limits


@pytest.fixture
def loaded(monkeypatch) -> list:
    """The models load_for_use (under load_checkpoint too) returns while the test runs."""
    seen = []
    read = load.load_for_use

    def spy(*args, **kwargs):
        model, tokenizers, decoding = read(*args, **kwargs)
        seen.append(model)
        return model, tokenizers, decoding

    monkeypatch.setattr(load, "load_for_use", spy)
    return seen


@pytest.mark.parametrize("options", [{}, {"int8": True}])
def test_a_language_model_is_held_once(lm_run, loaded, options):
    generator, embedder = server.load_product(str(lm_run), **options)
    assert embedder is None and len(loaded) == 1
    assert generator.model is loaded[0]  # made the inference copy in place, not copied beside the loaded one


def test_an_encoder_is_held_once_by_fill_mask_and_embed(mlm_run, loaded):
    filler, embedder = server.load_product(str(mlm_run))
    assert filler.model is loaded[0] and embedder.model is filler.model


@pytest.mark.parametrize("run, routes", [("trained_run", {"/translate", "/attention", "/refinement"}),
                                         ("lm_run", {"/generate", "/attention", "/v1/chat/completions"}),
                                         ("mlm_run", {"/fill-mask", "/embed", "/v1/embeddings"})])
def test_the_model_kind_picks_its_rooms(request, run, routes):
    product, embedder = server.load_product(str(request.getfixturevalue(run)))
    app = server.create_app(product, Limits(), embedder=embedder)
    paths = {route.path for route in app.routes}
    others = {"/translate", "/generate", "/fill-mask"} - routes
    assert routes <= paths and not others & paths and {"/health", "/metrics", "/"} <= paths
    with TestClient(app) as client:
        assert client.get("/health").json()["model"]["arch"] == product.model.config.arch
