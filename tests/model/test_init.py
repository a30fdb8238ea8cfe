"""Initialisation as documented in aiayn/model/init.py."""

import torch

from aiayn import EncoderDecoder

from conftest import tiny


def test_documented_initialisation():
    torch.manual_seed(0)
    model = EncoderDecoder(tiny(vocab_size=4000, d_model=128, positions="learned", share_embeddings="none"))
    q = model.encoder.layers[0].self_attn.q_proj
    bound = (6 / (q.in_features + q.out_features)) ** 0.5  # Xavier uniform
    assert q.weight.abs().max() <= bound and q.weight.abs().max() > 0.9 * bound
    assert torch.count_nonzero(q.bias) == 0
    table = model.src_embed.tokens.weight
    assert abs(table.std().item() - 128 ** -0.5) < 0.01  # N(0, d^-0.5): unit variance after x sqrt(d)
    assert abs(model.src_embed.positions.table.weight.std().item() - 0.02) < 0.002
    norm = model.encoder.layers[0].res_attn.norm
    assert torch.equal(norm.weight, torch.ones_like(norm.weight)) and torch.count_nonzero(norm.bias) == 0
