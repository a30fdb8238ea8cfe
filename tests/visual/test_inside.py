"""Inside one head: the numbers are the model's own (the heatmap's weights), and their arithmetic holds."""

import math

import pytest
import torch

from aiayn.inference.translator import Translator
from aiayn.model.attention import reference_attention
from aiayn.visual.attention import attention_for
from aiayn.visual.inside import inside_for


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_checkpoint(trained_run, beam_size=1)


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "cross"])
def test_inside_numbers_are_the_heatmaps_and_follow_equation_1(translator, kind):
    maps = attention_for(translator, "a b c d")
    n_rows = len(maps.axes(kind)[0])
    for layer, head, query in ((0, 0, 0), (1, 3, n_rows - 1), (1, 1, n_rows // 2)):
        inside = inside_for(translator, "a b c d", None, kind, layer, head, query)
        assert inside.weights == maps.weights[kind][layer, head, query].tolist()  # the heatmap's numbers
        assert inside.key_tokens == maps.axes(kind)[1] and inside.query_token == maps.axes(kind)[0][query]
        q, k, v = (torch.tensor(x) for x in (inside.query, inside.keys, inside.values))  # (D,), (S, D), (S, D)
        assert inside.scale == math.sqrt(q.numel()) == math.sqrt(translator.model.config.d_head)
        torch.testing.assert_close(torch.tensor(inside.scores), k @ q / inside.scale)
        mask = torch.tensor(inside.mask)
        if kind == "decoder_self":  # causal: row t sees keys 0..t
            assert mask.tolist() == [j <= query for j in range(len(mask))]
        expected = torch.tensor(inside.scores).masked_fill(~mask, float("-inf")).softmax(-1)
        torch.testing.assert_close(torch.tensor(inside.weights), expected, atol=1e-6, rtol=0)
        out, _ = reference_attention(q[None], k, v, mask[None])
        torch.testing.assert_close(torch.tensor(inside.output), out[0], atol=1e-5, rtol=0)


def test_inside_rejects_positions_that_do_not_exist(translator):
    for args, field in (((0, 0, 99), "query"), ((5, 0, 0), "layer"), ((0, 9, 0), "head")):
        with pytest.raises(ValueError, match=field):
            inside_for(translator, "a b", None, "encoder", *args)
    with pytest.raises(ValueError, match="kind"):
        inside_for(translator, "a b", None, "sideways", 0, 0, 0)


def test_inside_a_grouped_query_head_names_the_key_value_head_it_reads(lm_run):
    from aiayn.inference.load import load_checkpoint
    from aiayn.model.decoder_only import DecoderOnly
    from aiayn.visual.attention import lm_attention_for
    from aiayn.visual.inside import lm_inside_for

    trained, tokenizers = load_checkpoint(lm_run)
    heads = trained.config.n_heads
    model = DecoderOnly(trained.config.replace(n_kv_heads=heads // 2, positions="rope")).eval()
    text = "the cat sat"
    maps = lm_attention_for(model, tokenizers.src, text)
    last = len(maps.axes("decoder_self")[0]) - 1
    insides = [lm_inside_for(model, tokenizers.src, text, 0, head, last) for head in range(heads)]
    assert [i.kv_head for i in insides] == [h // 2 for h in range(heads)] and {i.group for i in insides} == {2}
    assert insides[0].keys == insides[1].keys and insides[0].values == insides[1].values  # one shared head
    assert insides[0].keys != insides[2].keys and insides[0].query != insides[1].query
    for head, inside in enumerate(insides):
        assert inside.weights == maps.weights["decoder_self"][0, head, last].tolist()
        q, k = torch.tensor(inside.query), torch.tensor(inside.keys)
        torch.testing.assert_close(torch.tensor(inside.scores), k @ q / inside.scale)
