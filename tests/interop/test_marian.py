"""Importing Hugging Face Marian (OPUS-MT) checkpoints: logits, greedy and beam output, tokenizer ids equal to
the Hugging Face model's; the imported checkpoint translates, serves and draws attention like any other."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from aiayn import generate
from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.inference.translator import Translator
from aiayn.interop import import_pretrained

SENTENCES = ["Ein Mann fährt ein Pferd.", "Kinder lachen im Schnee.", "A woman reads.", ">>deu<< Two dogs play.",
             "Zwei Hunde, drei Katzen!", "一个男人骑着马。", "Ünïcödé ß ẞ", ""]


@pytest.fixture(scope="module")
def imported(marian, import_hf):
    return import_hf(marian[0])


def test_tokenizer_ids_equal_hugging_face(marian, imported, same_ids):
    (_, tokenizers), _ = imported
    same_ids(tokenizers.src, tokenizers.tgt, marian[2], SENTENCES)  # the source ends with </s>


@pytest.mark.parametrize("activation, scale", [("swish", True), ("gelu", False), ("relu", True)])
def test_logits_equal_on_a_padded_batch(make_marian, tmp_path, activation, scale):
    from transformers import MarianMTModel, MarianTokenizer

    folder = make_marian(tmp_path, activation, scale, seed=1)
    hf, tok = MarianMTModel.from_pretrained(folder).eval(), MarianTokenizer.from_pretrained(folder)
    import_pretrained(folder, tmp_path / "ckpt")
    model, _ = load_checkpoint(tmp_path / "ckpt")
    batch = tok(SENTENCES[:3], return_tensors="pt", padding=True)
    assert (batch.attention_mask == 0).any()  # the batch has padding
    start = hf.config.decoder_start_token_id
    dec = torch.tensor([[start, 5, 7, 9, 11], [start, 3, 4, 6, 0], [start, 8, 8, 2, 9]])
    with torch.no_grad():
        ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec).logits
        ours = model.eval()(batch.input_ids, dec)
    assert (ref - ours).abs().max() <= 1e-4


def test_greedy_and_beam_equal_hugging_face_generate(marian, imported):
    _, hf, tok = marian
    (model, _), _ = imported
    for text in SENTENCES[:4]:
        src = tok([text], return_tensors="pt").input_ids
        for beams in (1, 4):  # length penalty 0 on both sides: beams ranked by their summed log-probabilities
            ref = hf.generate(src, max_new_tokens=20, do_sample=False, num_beams=beams, forced_eos_token_id=None,
                              bad_words_ids=[[hf.config.pad_token_id]], length_penalty=0.0)[0].tolist()
            ref = [t for t in ref[1:] if t not in (hf.config.eos_token_id, hf.config.pad_token_id)]
            ours = generate(model.eval(), src, "greedy" if beams == 1 else "beam", beam_size=beams,
                            max_new_tokens=20, length_penalty=0.0, max_len_b=None)[0]
            assert ours == ref, (text, beams)


def test_the_imported_checkpoint_translates_and_draws_attention(marian, imported, capsys):
    _, hf, tok = marian
    _, folder = imported
    translator = Translator.from_checkpoint(folder, beam_size=1)
    src = tok([SENTENCES[0]], return_tensors="pt").input_ids
    ref = hf.generate(src, max_new_tokens=30, num_beams=1, do_sample=False, forced_eos_token_id=None,
                      bad_words_ids=[[hf.config.pad_token_id]])
    expected = tok.decode(ref[0], skip_special_tokens=True)
    assert translator.translate([SENTENCES[0]], max_new_tokens=30, max_len_b=None) == [expected]
    from aiayn.visual.attention import attention_for

    maps = attention_for(translator, SENTENCES[0])
    assert maps.source_tokens[-1] == "</s>" and maps.weights["cross"].shape[-1] == len(src[0])


def test_the_import_command(marian, tmp_path, capsys):
    folder, _, _ = marian
    assert main(["import", str(folder), "--output", str(tmp_path / "ck")]) == 0
    assert (tmp_path / "ck" / "model.safetensors").is_file() and (tmp_path / "ck" / "vocab.json").is_file()
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert config["sinusoid_layout"] == "halves" and config["bos_id"] == config["pad_id"]


def _broken_copy(marian, tmp_path):
    folder, _, _ = marian
    copy = tmp_path / "broken"
    shutil.copytree(folder, copy)
    return copy


@pytest.mark.parametrize("breakage, words", [
    ("model_type", "model_type 'bart' is not supported; aiayn imports marian"),
    ("no_vocab", "vocab.json: missing"),
    ("shape", "tensor for encoder.layers.0.ffn.linear1.weight has shape"),
    ("missing_tensor", "tensor model.encoder.layers.1.fc2.bias is missing"),
    ("no_weights", "no model.safetensors (nor model.safetensors.index.json, nor pytorch_model.bin)"),
    ("pickle", "pytorch_model.bin: not a plain tensor file"),
    ("activation", "activation_function 'gelu_fast' is not supported"),
    ("separate", "separate source and target vocabularies) is not supported"),
])
def test_bad_folders_give_one_line_errors(marian, tmp_path, capsys, breakage, words):
    folder = _broken_copy(marian, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(folder / "model.safetensors")
    if breakage in ("model_type", "activation", "separate"):
        config.update({"model_type": {"model_type": "bart"}, "activation": {"activation_function": "gelu_fast"},
                       "separate": {"share_encoder_decoder_embeddings": False}}[breakage])
        (folder / "config.json").write_text(json.dumps(config))
    elif breakage == "no_vocab":
        (folder / "vocab.json").unlink()
    elif breakage in ("shape", "missing_tensor"):
        if breakage == "shape":
            weights["model.encoder.layers.0.fc1.weight"] = torch.zeros(3, 3)
        else:
            del weights["model.encoder.layers.1.fc2.bias"]
        save_file(weights, folder / "model.safetensors")
    else:
        (folder / "model.safetensors").unlink()
        if breakage == "pickle":
            import pickle

            (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": object()}))
    assert main(["import", str(folder), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_pytorch_bin_of_plain_tensors_is_read(marian, tmp_path):
    folder = _broken_copy(marian, tmp_path)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    import_pretrained(folder, tmp_path / "ck")
    assert load_checkpoint(tmp_path / "ck")[0].config.output_bias


def test_generation_config_comes_in_and_goes_out(marian, tmp_path):
    """A folder's generation_config.json (num_beams, sampling) becomes the checkpoint's generation.json, which
    translate uses; an export writes the checkpoint's decoding back as num_beams."""
    from aiayn.decoding.config import DecodingConfig

    folder = tmp_path / "hf"
    shutil.copytree(marian[0], folder)
    theirs = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**theirs, "num_beams": 3, "max_length": 64}))
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    assert DecodingConfig.load(tmp_path / "ckpt").beam_size == 3
    assert Translator.from_checkpoint(tmp_path / "ckpt").decoding.beam_size == 3
    assert main(["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--output",
                 str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text())["num_beams"] == 3
    (folder / "generation_config.json").write_text(json.dumps({"num_beams": 0}))
    assert main(["import", str(folder), "--output", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()
