"""Importing and exporting Hugging Face T5 (v1.0, v1.1, Flan-T5): relative position buckets equal transformers' own,
logits on a padded batch within 1e-4, greedy and beam output equal to ``generate()``, tokenizer ids equal (from
``tokenizer.json`` or ``spiece.model`` alone), sharded folders, a task prefix through the CLI, export back to a folder
transformers loads, LoRA adapters PEFT loads, and bad folders one line."""

import io
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from aiayn import generate
from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.interop import import_pretrained
from aiayn.model.positions import relative_buckets

from conftest import png_pixels

transformers = pytest.importorskip("transformers")
SENTENCES = ["Ein Mann fährt ein Pferd.", "Zwei Hunde spielen im Schnee.", "A woman reads a book.",
             "translate English to German: Two dogs play.", "Kinder   lachen  ", "Ünïcödé ß", ""]


FLAVOURS = ("v1.0", "v1.1", "flan")


def _hf(folder):
    return transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()


@pytest.fixture(scope="module", params=FLAVOURS)
def t5(request, tmp_path_factory, make_t5):
    """(flavour, Hugging Face folder, its model, its tokenizer, the imported checkpoint)."""
    folder = make_t5(tmp_path_factory.mktemp(f"t5-{request.param}"), request.param)
    ckpt = folder.parent / "ckpt"
    assert main(["import", str(folder), "--output", str(ckpt)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return request.param, folder, _hf(folder), tok, ckpt


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets, distance", [(32, 128), (8, 20), (6, 9)])
def test_relative_buckets_equal_transformers(bidirectional, buckets, distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-300, 301)
    theirs = T5Attention._relative_position_bucket(relative, bidirectional, buckets, distance)
    assert torch.equal(relative_buckets(relative, bidirectional, buckets, distance), theirs)


def test_the_config_reads_each_flavour(t5):
    flavour, _, _, _, ckpt = t5
    cfg = load_checkpoint(ckpt)[0].config
    assert (cfg.positions, cfg.norm, cfg.norm_type, cfg.scale_attention, cfg.bos_id, cfg.eos_id) == \
        ("relative", "pre", "rmsnorm", False, 0, 1)
    assert cfg.feed_forward == ("standard" if flavour == "v1.0" else "swiglu")
    assert cfg.share_embeddings == ("inputs" if flavour == "flan" else "all")
    assert cfg.rescale_output == (flavour == "v1.0")


def test_logits_equal_on_a_padded_batch(t5):
    _, _, hf, tok, ckpt = t5
    model, _ = load_checkpoint(ckpt)
    batch = tok(SENTENCES[:4], return_tensors="pt", padding=True)
    assert (batch.attention_mask == 0).any()
    dec = torch.tensor([[0, 5, 7, 9, 11, 13], [0, 3, 4, 6, 8, 8], [0, 8, 8, 2, 9, 30], [0, 1, 12, 14, 3, 3]])
    with torch.no_grad():
        ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec).logits
        ours = model(batch.input_ids, dec)
    assert ref.abs().max() > 0.1  # a real signal, not zeros against zeros
    assert (ref - ours).abs().max() <= 1e-4


def test_greedy_and_beam_equal_hugging_face_generate(t5):
    _, _, hf, tok, ckpt = t5
    model, _ = load_checkpoint(ckpt)
    for text in SENTENCES[:4]:
        src = tok([text], return_tensors="pt").input_ids
        for beams in (1, 3):  # length penalty 0 on both sides: beams ranked by their summed log-probabilities
            ref = hf.generate(src, max_new_tokens=12, do_sample=False, num_beams=beams, length_penalty=0.0,
                              bad_words_ids=[[0]])[0].tolist()
            ref = [t for t in ref[1:] if t not in (0, 1)]
            ours = generate(model, src, "greedy" if beams == 1 else "beam", beam_size=beams, max_new_tokens=12,
                            length_penalty=0.0, max_len_b=None)[0]
            assert ours == ref, (text, beams)


def test_a_batch_decodes_as_each_sentence_alone(t5):
    _, _, _, tok, ckpt = t5
    model, _ = load_checkpoint(ckpt)
    batch = tok(SENTENCES[:4], return_tensors="pt", padding=True).input_ids
    together = generate(model, batch, "greedy", max_new_tokens=10, max_len_b=None)
    alone = [generate(model, tok([s], return_tensors="pt").input_ids, "greedy", max_new_tokens=10,
                      max_len_b=None)[0] for s in SENTENCES[:4]]
    assert together == alone


def test_tokenizer_ids_equal_hugging_face(t5, same_ids):
    _, _, _, tok, ckpt = t5
    _, tokenizers = load_checkpoint(ckpt)
    same_ids(tokenizers.src, tokenizers.tgt, tok, SENTENCES)


def test_a_folder_with_spiece_model_alone(tmp_path, same_ids, make_t5):
    folder = make_t5(tmp_path, "v1.1")
    (folder / "tokenizer.json").unlink()
    tok = transformers.T5Tokenizer.from_pretrained(folder)  # converted from spiece.model by transformers
    import_pretrained(folder, tmp_path / "ckpt")
    _, tokenizers = load_checkpoint(tmp_path / "ckpt")
    same_ids(tokenizers.src, tokenizers.tgt, tok, [*SENTENCES, "<extra_id_0> and <extra_id_3>"])


def test_a_sharded_folder_imports_the_same(tmp_path, make_t5):
    whole = make_t5(tmp_path / "a", "flan")
    sharded = make_t5(tmp_path / "b", "flan", shard=True)
    assert (sharded / "model.safetensors.index.json").is_file()
    import_pretrained(whole, tmp_path / "ca")
    import_pretrained(sharded, tmp_path / "cb")
    a, b = load_checkpoint(tmp_path / "ca")[0], load_checkpoint(tmp_path / "cb")[0]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_translate_with_a_task_prefix(t5, capsys, tmp_path):
    _, _, hf, tok, ckpt = t5
    prefix = "translate English to German: "
    (tmp_path / "in.txt").write_text("Two dogs play.\n")
    assert main(["translate", "--checkpoint", str(ckpt), "--source-prefix", prefix, "--beam-size", "1",
                 "--max-new-tokens", "12", "--max-len-b", "100", "--input", str(tmp_path / "in.txt")]) == 0
    out = capsys.readouterr().out.strip()
    src = tok([prefix + "Two dogs play."], return_tensors="pt").input_ids
    ref = hf.generate(src, max_new_tokens=12, do_sample=False, num_beams=1, bad_words_ids=[[0]])[0]
    assert out == tok.decode(ref, skip_special_tokens=True)


def test_export_gives_a_folder_transformers_loads_with_the_same_logits(t5, tmp_path):
    flavour, folder, _, tok, ckpt = t5
    assert main(["export", "--checkpoint", str(ckpt), "--format", "hf", "--output", str(tmp_path / "out")]) == 0
    exported = load_file(tmp_path / "out" / "model.safetensors")
    original = load_file(folder / "model.safetensors")
    assert set(exported) - set(original) == set()  # Hugging Face's names, nothing of aiayn's
    for name, tensor in exported.items():
        assert torch.equal(tensor, original[name]), name
    hf, info = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    hf = hf.eval()
    assert (hf.lm_head.weight is hf.shared.weight) == (flavour != "flan")
    model, _ = load_checkpoint(ckpt)
    src = tok(SENTENCES[:2], return_tensors="pt", padding=True)
    dec = torch.tensor([[0, 5, 7], [0, 9, 3]])
    with torch.no_grad():
        ref = hf(input_ids=src.input_ids, attention_mask=src.attention_mask, decoder_input_ids=dec).logits
        assert (ref - model(src.input_ids, dec)).abs().max() <= 1e-4
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "out")("A b.").input_ids == tok("A b.").input_ids


def test_an_aiayn_lora_adapter_on_t5_loads_in_peft(t5, tmp_path):
    peft = pytest.importorskip("peft")
    from aiayn.interop.peft import save_adapter
    from aiayn.model.lora import apply_lora

    _, folder, _, _, ckpt = t5
    model, _ = load_checkpoint(ckpt)
    apply_lora(model, r=4, alpha=8.0, targets="q,k,v,o,ffn")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    (tmp_path / "adapter").mkdir()
    save_adapter(model, tmp_path / "adapter", base=str(folder))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert set(config["target_modules"]) >= {"q", "k", "v", "o", "wo"}
    theirs = peft.PeftModel.from_pretrained(_hf(folder), tmp_path / "adapter").eval()
    ids = torch.randint(5, 40, (2, 9))
    dec = torch.cat([torch.zeros(2, 1, dtype=torch.long), ids[:, :4]], dim=1)
    with torch.no_grad():
        ours, ref = model.eval()(ids, dec), theirs(input_ids=ids, decoder_input_ids=dec).logits
        base = load_checkpoint(ckpt)[0](ids, dec)
    assert (ours - ref).abs().max() <= 1e-5
    assert (base - ref).abs().max() > 1e-3  # the adapter changes the model


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "model.safetensors").write_bytes(b"junk"), "not a safetensors file"),
    (lambda f: _drop(f, "decoder.final_layer_norm.weight"), "tensor decoder.final_layer_norm.weight is missing"),
    (lambda f: _config(f, feed_forward_proj="gated-tanh"), "activation 'tanh' is not supported"),
    (lambda f: _config(f, feed_forward_proj="a-b-c"), "is not 'ACT' or 'gated-ACT'"),
    (lambda f: _config(f, d_kv=4), "has shape"),
    (lambda f: _config(f, vocab_size=10), "the tokenizer has"),
])
def test_bad_folders_are_one_line(tmp_path, capsys, damage, message, make_t5):
    folder = make_t5(tmp_path, "v1.0")
    damage(folder)
    capsys.readouterr()
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "ckpt").exists()


def test_a_model_t5_cannot_express_is_refused_by_name(tmp_path, capsys):
    from aiayn.formats.t5 import t5_problems
    from aiayn.model.config import ModelConfig

    cfg = ModelConfig.preset("tiny", vocab_size=50, positions="relative", norm="pre", norm_type="rmsnorm",
                             qkv_bias=False, out_bias=False, ffn_bias=False, scale_attention=False,
                             scale_embeddings=False)
    assert t5_problems(cfg) == []
    assert t5_problems(cfg.replace(qkv_bias=True)) == ["biases (T5 has none)"]
    assert any("scale_attention" in p for p in t5_problems(cfg.replace(scale_attention=True)))


def _drop(folder, name):
    tensors = load_file(folder / "model.safetensors")
    del tensors[name]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def test_the_spiece_converter_refuses_what_is_not_a_unigram_model(tmp_path):
    import sentencepiece as spm

    from aiayn.formats.t5 import spiece_tokenizer_json

    with pytest.raises(ValueError, match="not a SentencePiece model"):
        spiece_tokenizer_json(b"\x00junk\xff" * 5, 0, tmp_path / "spiece.model")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES[:3] * 20), model_writer=buf, vocab_size=40,
                                   model_type="bpe", hard_vocab_limit=False, minloglevel=2)
    with pytest.raises(ValueError, match="unigram"):
        spiece_tokenizer_json(buf.getvalue(), 0, tmp_path / "spiece.model")


def test_show_positions_draws_an_imported_t5s_tables(t5, tmp_path, capsys, trained_run):
    _, _, _, _, ckpt = t5
    assert main(["show", "positions", "--kind", "relative", "--checkpoint", str(ckpt), "--length", "30",
                 "--output", str(tmp_path / "rel.png")]) == 0
    drawn = png_pixels(tmp_path / "rel.png", (17, 5))  # three panels
    model = load_checkpoint(ckpt)[0]
    bias = model.encoder.position_bias
    assert main(["show", "positions", "--kind", "relative", "--length", "30", "--buckets", str(bias.n_buckets),
                 "--max-distance", str(bias.max_distance), "--heads", str(model.config.n_heads),
                 "--output", str(tmp_path / "random.png")]) == 0
    assert (abs(drawn - png_pixels(tmp_path / "random.png", (17, 5))) > 0.1).mean() > 0.01  # the T5's own tables
    capsys.readouterr()
    assert main(["show", "positions", "--kind", "relative", "--checkpoint", str(trained_run),
                 "--output", str(tmp_path / "no.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "positions sinusoidal" in err and "(a T5)" in err and "\n" not in err
