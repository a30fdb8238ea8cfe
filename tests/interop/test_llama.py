"""Importing Llama, Qwen2, Qwen3 and Mistral checkpoints: logits within 1e-4 of the Hugging Face model's on padded
batches, greedy and seeded sampling equal to ``generate()`` token for token, sharded and single-file folders
giving the same model, and every bad folder refused in one line with nothing written."""

import json
import shutil

import pytest
import torch

from aiayn import generate
from aiayn.cli import main
from aiayn.inference.load import load_checkpoint

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
VARIANTS = {  # name: (model_type, config overrides)
    "llama-gqa-llama3": ("llama", dict(rope_parameters={**LLAMA3, "rope_theta": 500.0})),
    "llama-mha-linear": ("llama", dict(num_key_value_heads=4, rope_parameters={"rope_type": "linear", "factor": 4.0,
                                                                             "rope_theta": 10000.0})),
    "llama-mqa-tied": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "qwen2-biases": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen3-qk-norm": ("qwen3", dict(head_dim=16, tie_word_embeddings=True)),  # wider heads than d/h, as Qwen3's
    "qwen3-biases": ("qwen3", dict(attention_bias=True)),
    "mistral-window": ("mistral", dict(sliding_window=5)),
    # two sliding layers (window 4, shorter than the prompts) and a full one, each kind its rotary base; q/k norms,
    # sandwich norms, GeLU-tanh gated FFN, embeddings x sqrt(d): Gemma 3's options
    "phi3-fused-partial": ("phi3", dict(pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                                          "partial_rotary_factor": 0.5})),
    "mixtral-4-experts-top2": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen3-moe-norm-topk": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                              norm_topk_prob=True, head_dim=16)),
    "qwen3-moe-plain-top3": ("qwen3_moe", dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=16,
                                               norm_topk_prob=False)),
    # a multimodal Gemma 3 folder (Gemma3ForConditionalGeneration): its language model, the vision tower left out
    "gemma3-multimodal-text": ("gemma3", dict(num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16,
                                              sliding_window=4, pad_token_id=0,
                                              layer_types=["sliding_attention", "sliding_attention",
                                                           "full_attention"])),
    # Gemma 2: sandwich norms, alternating sliding and full layers, a query scale other than the head size, and both
    # soft-caps small enough to bite on random weights
    "gemma2-softcaps": ("gemma2", dict(num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=12, sliding_window=4,
                                       pad_token_id=0, attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gemma3-layers": ("gemma3_text", dict(num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16,
                                         sliding_window=4, pad_token_id=0,
                                         layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                         rope_parameters={"sliding_attention": {"rope_type": "default",
                                                                                "rope_theta": 10.0},
                                                          "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                             "rope_theta": 1000.0}})),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, tmp_path_factory, make_llama):
    """(the Hugging Face model, the imported aiayn model) of one variant, the folder sharded."""
    import transformers

    kind, overrides = VARIANTS[request.param]
    folder = make_llama(tmp_path_factory.mktemp(request.param) / "hf", kind, shard=True, **overrides)
    assert (folder / "model.safetensors.index.json").is_file()
    out = folder.parent / "ckpt"
    assert main(["import", str(folder), "--output", str(out)]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    return hf, load_checkpoint(out)[0].eval()


def _prompts(lengths, pad):
    """Rows of random ids, right-padded with aiayn's pad (B, T), and the same rows left-padded for Hugging Face
    with their attention mask and positions."""
    width = max(lengths)
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(3, 128, (n,), generator=g) for n in lengths]
    ours = torch.full((len(rows), width), pad)
    left = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ours[i, : len(row)] = row
        left[i, width - len(row):] = row
        mask[i, width - len(row):] = 1
    return ours, left, mask


def test_logits_equal_on_a_padded_batch(pair):
    hf, model = pair
    _, left, mask = _prompts([12, 7, 3], model.config.pad_id)
    left_pad = (1 - mask).sum(dim=1)  # (B,)
    with torch.no_grad():
        ref = hf(input_ids=left, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
        ours = model.decode(left, left_pad=left_pad)[..., : ref.size(-1)]
    real = mask.bool()
    assert (ref - ours)[real].abs().max() <= 1e-4
    assert model.config.vocab_size == ref.size(-1) + model.config.padding_row  # the appended padding row (not Gemma)


def test_greedy_and_seeded_sampling_equal_generate(pair):
    hf, model = pair
    ours_ids, left, mask = _prompts([9, 4], model.config.pad_id)
    ref = hf.generate(left, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)[:, left.size(1):]
    assert generate(model, ours_ids, "greedy", max_new_tokens=12) == [_until_eos(row) for row in ref.tolist()]
    for row in range(2):  # sampling one prompt at a time: the random stream is consumed the same way
        n = int(mask[row].sum())
        prompt = left[row:row + 1, -n:]
        torch.manual_seed(7)
        ref = hf.generate(prompt, max_new_tokens=10, do_sample=True, top_k=0, top_p=1.0, temperature=0.8,
                          pad_token_id=0)[0, n:]
        ours = generate(model, prompt, "sample", max_new_tokens=10, temperature=0.8, seed=7)
        assert ours[0] == _until_eos(ref.tolist())


def _until_eos(row: list[int]) -> list[int]:
    return row[: row.index(2)] if 2 in row else row


def test_sharded_and_single_file_give_the_same_model(tmp_path, make_llama):
    whole = make_llama(tmp_path / "whole", "qwen2", shard=False)
    shards = make_llama(tmp_path / "shards", "qwen2", shard=True)
    assert not (whole / "model.safetensors.index.json").exists()
    for name, folder in (("a", whole), ("b", shards)):
        assert main(["import", str(folder), "--output", str(tmp_path / name)]) == 0
    a, b = (load_checkpoint(tmp_path / name)[0].state_dict() for name in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_tokenizer_chat_template_and_generation_defaults_come_along(tmp_path, make_llama):
    from transformers import AutoTokenizer

    folder = make_llama(tmp_path / "hf", "llama")
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.6, "top_p": 0.9,
                                                               "eos_token_id": [2, 5]}))
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    _, tokenizers = load_checkpoint(tmp_path / "ckpt")
    theirs = AutoTokenizer.from_pretrained(folder)
    for text in ["w5 w6 w7", "w100 unknownword w3"]:
        assert tokenizers.src.encode(text) == theirs(text).input_ids
    messages = [{"role": "user", "content": "w5 w6"}, {"role": "assistant", "content": "w7"},
                {"role": "user", "content": "w8"}]
    for prompt in (True, False):
        assert tokenizers.apply_chat_template(messages, prompt) == theirs.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=prompt)
    decoding = json.loads((tmp_path / "ckpt" / "generation.json").read_text())
    assert decoding == {"strategy": "sample", "temperature": 0.6, "top_p": 0.9}


def _break(folder, how):
    index = folder / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())
    if how == "missing shard":
        (folder / sorted(set(weight_map["weight_map"].values()))[1]).unlink()
    elif how == "index names a missing tensor":
        weight_map["weight_map"]["model.layers.9.mlp.up_proj.weight"] = weight_map["weight_map"]["model.norm.weight"]
        index.write_text(json.dumps(weight_map))
    elif how == "wrong shape":
        config = json.loads((folder / "config.json").read_text())
        index.write_text(json.dumps(weight_map))
        (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))
    elif how == "unknown rope scaling":
        config = json.loads((folder / "config.json").read_text())
        config["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
        (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("how, message", [
    ("missing shard", "is missing from"),
    ("index names a missing tensor", "tensor model.layers.9.mlp.up_proj.weight is not in"),
    ("wrong shape", "mlp.down_proj.weight has shape (32, 48), config.json says (32, 40)"),
    ("unknown rope scaling", "rope scaling 'yarn' is not supported; aiayn has linear, llama3"),
])
def test_bad_folders_are_one_line_and_write_nothing(tmp_path, capsys, make_llama, how, message):
    folder = make_llama(tmp_path / "hf", "llama", shard=True)
    _break(folder, how)
    capsys.readouterr()
    out = tmp_path / "ckpt"
    assert main(["import", str(folder), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    shutil.rmtree(folder)


def test_attention_pictures_of_an_imported_gqa_model(tmp_path, make_llama, capsys):
    from aiayn.inference.load import load_checkpoint as load
    from aiayn.visual.attention import lm_attention_for
    from aiayn.visual.inside import lm_inside_for

    folder = make_llama(tmp_path / "hf", "mistral", sliding_window=3)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    assert main(["show", "attention", "--checkpoint", str(tmp_path / "ckpt"), "w5 w6 w7 w8 w9", "--output",
                 str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 1000
    model, tokenizers = load(tmp_path / "ckpt")
    maps = lm_attention_for(model, tokenizers.src, "w5 w6 w7 w8 w9")
    weights = maps.weights["decoder_self"]  # (L, H, T, T): 6 tokens with <s>, a window of 3
    assert weights.shape == (2, 4, 6, 6) and bool((weights[..., 5, :3] == 0).all())
    inside = lm_inside_for(model, tokenizers.src, "w5 w6 w7 w8 w9", 1, 3, 5)
    assert (inside.kv_head, inside.group) == (1, 2) and inside.mask == [False] * 3 + [True] * 3
    assert main(["show", "attention", "--checkpoint", str(tmp_path / "ckpt"), "w5", "--kind", "cross",
                 "--output", str(tmp_path / "b.png")]) == 2
    assert "causal self-attention (decoder_self) only" in capsys.readouterr().err


def test_several_eos_ids_all_stop_and_export_back(tmp_path, make_llama):
    """Llama 3 lists several end ids: the first is EOS, the others stop_ids, and the export lists them all."""
    make_llama(tmp_path / "hf", "llama", eos_token_id=[2, 5, 7])
    assert main(["import", str(tmp_path / "hf"), "--output", str(tmp_path / "ckpt")]) == 0
    cfg = load_checkpoint(tmp_path / "ckpt")[0].config
    assert (cfg.eos_id, cfg.stop_ids, cfg.end_ids) == (2, (5, 7), (2, 5, 7))
    assert main(["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--output",
                 str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eos_token_id"] == [2, 5, 7]


def test_phi3_long_rope_is_refused_by_name(tmp_path, make_llama, capsys):
    folder = make_llama(tmp_path / "hf", "phi3", pad_token_id=0)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4,
                                 "long_factor": [2.0] * 4, "original_max_position_embeddings": 64}
    (folder / "config.json").write_text(json.dumps(config))
    assert main(["import", str(folder), "--output", str(tmp_path / "out")]) == 2
    assert "'longrope' (Phi-3's long-context LongRoPE) is not supported" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("theirs, ours", [
    (None, {"temperature": 0.0}),  # no file: greedy, as Hugging Face's generate
    ({"bos_token_id": 1}, {"temperature": 0.0}),  # a file silent on sampling: the same
    ({"do_sample": False, "temperature": 0.6}, {"temperature": 0.0}),  # greedy, said: Hugging Face ignores the 0.6
    ({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "min_p": 0.0},
     {"strategy": "sample", "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}),  # Qwen2.5's
])
def test_an_imported_language_model_decodes_as_its_files_say_else_greedily(tmp_path, make_llama, theirs, ours):
    folder = make_llama(tmp_path / "hf", "llama")
    (folder / "generation_config.json").unlink(missing_ok=True)
    if theirs is not None:
        (folder / "generation_config.json").write_text(json.dumps(theirs))
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    assert json.loads((tmp_path / "ckpt" / "generation.json").read_text()) == ours


PAD_PROMPT = torch.tensor([[5, 0, 17, 40, 0, 9, 0]])  # (1, 7): a text holding Gemma's pad id


@pytest.fixture(scope="module")
def gemma_with_a_live_pad(tmp_path_factory, make_llama):
    """A random Gemma 3 whose ``<pad>`` (id 0, a word of its vocabulary) has a row of its own, so that greedy decoding
    generates it: (the Hugging Face model, the imported aiayn model)."""
    import transformers

    kind, overrides = VARIANTS["gemma3-layers"]
    folder = make_llama(tmp_path_factory.mktemp("gemma-pad") / "hf", kind, **overrides)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        table = hf.get_input_embeddings().weight  # tied: the output's rows too
        first = int(hf(input_ids=PAD_PROMPT).logits[0, -1].argmax())
        table[0] = table[first] * 1.5  # its row scaled up: <pad> wins where that token did
    hf.save_pretrained(folder)
    out = folder.parent / "ckpt"
    assert main(["import", str(folder), "--output", str(out)]) == 0
    return hf, load_checkpoint(out)[0].eval()


def test_a_pad_id_is_a_token_where_the_vocabulary_has_it(gemma_with_a_live_pad):
    """Padding is where the engine put it, never a token's value: a Gemma text holding its pad id, in the middle and
    at the end, scores, continues and batches as transformers does, and greedy decoding generates it."""
    hf, model = gemma_with_a_live_pad
    prompt = PAD_PROMPT
    with torch.no_grad():
        ref = hf(input_ids=prompt).logits
        assert (model(prompt)[..., : ref.size(-1)] - ref).abs().max() <= 1e-4
    theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)[0, prompt.size(1):].tolist()
    assert 0 in _until_eos(theirs)  # the check below reads a generated pad id
    assert generate(model, prompt, "greedy", max_new_tokens=12)[0] == _until_eos(theirs)
    # in a batch, a row's padding is the pad ids that end it (masks.prompt_lengths); the others are its tokens
    batch = torch.tensor([[5, 0, 17, 40, 0, 9], [8, 0, 3, 0, 0, 0]])  # row 1: [8, 0, 3], then padding
    alone = [generate(model, row, "greedy", max_new_tokens=8)[0] for row in (batch[:1], batch[1:, :3])]
    assert generate(model, batch, "greedy", max_new_tokens=8) == alone
