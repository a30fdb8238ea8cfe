"""Exporting aiayn translators: a Hugging Face Marian folder with the same logits (and back through
``aiayn import``), a CTranslate2 model with the same greedy output, and clear refusals."""

import json

import pytest
import torch

from aiayn import generate
from aiayn.cli import main
from aiayn.inference.load import load_checkpoint

SOURCES = ["a b c d e", "f g h", "c c a b d e f g"]


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "hf"
    assert main(["export", "--checkpoint", str(trained_run), "--format", "hf", "--output", str(out)]) == 0
    return out


def _batch(tokenizers, pad):
    rows = [tokenizers.src.encode(s) for s in SOURCES]
    width = max(map(len, rows))
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # (B, S) right-padded


def test_hugging_face_loads_the_export_with_the_same_logits(trained_run, exported):
    from transformers import MarianMTModel, MarianTokenizer

    model, tokenizers = load_checkpoint(trained_run)
    cfg = model.eval().config
    assert cfg.sinusoid_layout == "interleaved"  # the permutation to Marian's halves is exercised
    hf = MarianMTModel.from_pretrained(exported).eval()
    src = _batch(tokenizers, cfg.pad_id)
    dec = torch.tensor([[cfg.bos_id, 7, 8, 9], [cfg.bos_id, 9, 9, 5], [cfg.bos_id, 6, 10, 12]])
    with torch.no_grad():
        ref = model(src, dec)
        theirs = hf(input_ids=src, attention_mask=(src != cfg.pad_id).long(), decoder_input_ids=dec).logits
    assert (ref - theirs).abs().max() <= 1e-4
    hf_tok = MarianTokenizer.from_pretrained(exported)
    for text in SOURCES:  # the same ids (aiayn's sources carry no </s>: add_special_tokens=False)
        assert hf_tok(text, add_special_tokens=False).input_ids == tokenizers.src.encode(text)
    out = hf.generate(src[:1], attention_mask=(src[:1] != cfg.pad_id).long(), max_new_tokens=20, num_beams=1,
                      do_sample=False, bad_words_ids=[[cfg.bos_id], [cfg.pad_id]])[0, 1:].tolist()
    mine = generate(model, src[:1], "greedy", max_new_tokens=20, max_len_b=None)[0]
    assert out[: len(mine)] == mine and out[len(mine)] == cfg.eos_id


def test_export_then_import_round_trips(trained_run, exported, tmp_path):
    assert main(["import", str(exported), "--output", str(tmp_path / "back")]) == 0
    (model, tokenizers), (back, _) = load_checkpoint(trained_run), load_checkpoint(tmp_path / "back")
    src = _batch(tokenizers, model.config.pad_id)
    for a, b in ((model.eval(), back.eval()),):
        assert generate(a, src, "beam", beam_size=4, max_new_tokens=20) == \
            generate(b, src, "beam", beam_size=4, max_new_tokens=20)
        dec = torch.tensor([[model.config.bos_id, 7, 8]] * 3)
        assert (a(src, dec) - b(src, dec)).abs().max() <= 1e-4


def test_ctranslate2_gives_the_same_greedy_output(trained_run, tmp_path):
    import ctranslate2

    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(trained_run), "--format", "ctranslate2", "--output", str(out)]) == 0
    model, tokenizers = load_checkpoint(trained_run)
    translator = ctranslate2.Translator(str(out), device="cpu")
    for text in SOURCES:
        ids = tokenizers.src.encode(text)
        result = translator.translate_batch([tokenizers.src.pieces(ids)], beam_size=1, max_decoding_length=20)
        mine = generate(model.eval(), torch.tensor([ids]), "greedy", max_new_tokens=20, max_len_b=None)[0]
        assert result[0].hypotheses[0] == tokenizers.tgt.pieces(mine), text


@pytest.mark.parametrize("norm, positions", [("pre", "sinusoidal"), ("post", "learned"), ("pre", "learned")])
def test_ctranslate2_scores_pre_norm_and_learned_positions_as_aiayn(trained_run, tmp_path, norm, positions):
    """Pre-norm (with its final LayerNorms) and learned position tables (each side its own) convert too:
    CTranslate2 gives each target token the log-probability aiayn gives it. (An untrained model: its greedy
    output may be <s>, which aiayn never generates and CTranslate2 does, so only the scores are compared.)"""
    import ctranslate2

    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.transformer import EncoderDecoder

    trained, tokenizers = load_checkpoint(trained_run)
    torch.manual_seed(0)
    model = EncoderDecoder(trained.config.replace(norm=norm, positions=positions)).eval()
    write_checkpoint(tmp_path / "m", model, tokenizers)
    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(tmp_path / "m"), "--format", "ctranslate2", "--output", str(out)]) == 0
    translator, cfg = ctranslate2.Translator(str(out), device="cpu"), model.config
    for text, target in zip(SOURCES, ([7, 8, 9], [9, 9, 5, 6], [6, 10]), strict=True):
        ids = tokenizers.src.encode(text)
        scored = translator.score_batch([tokenizers.src.pieces(ids)], [tokenizers.tgt.pieces(target)])[0]
        with torch.no_grad():
            logp = model(torch.tensor([ids]), torch.tensor([[cfg.bos_id, *target]])).log_softmax(-1)[0]
        mine = logp.gather(1, torch.tensor([*target, cfg.eos_id])[:, None])[:, 0]  # (T+1,): each token, then </s>
        assert torch.allclose(torch.tensor(scored.log_probs), mine, atol=1e-3), (norm, positions, text)


def test_export_refuses_separate_vocabularies_and_writes_nothing(trained_run, tmp_path, capsys):
    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.transformer import EncoderDecoder
    from aiayn.tokenizers.sentencepiece import SentencePiecePair

    words = [" ".join(f"w{(i * 7 + j) % 90}" for j in range(8)) for i in range(300)]
    pair = SentencePiecePair.train(words, [w.upper() for w in words], vocab_size=300, joint=False)
    trained, _ = load_checkpoint(trained_run)
    cfg = trained.config.replace(vocab_size=len(pair.src), tgt_vocab_size=len(pair.tgt),
                                 share_embeddings="none")
    write_checkpoint(tmp_path / "sep", EncoderDecoder(cfg), pair)
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "sep"), "--format", "hf", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "separate source and target vocabularies" in err and err.count("\n") == 1
    assert not out.exists()


def test_what_marian_cannot_express_is_named(trained_run, lm_run, tmp_path, capsys):
    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.transformer import EncoderDecoder

    model, tokenizers = load_checkpoint(trained_run)
    write_checkpoint(tmp_path / "pre", EncoderDecoder(model.config.replace(norm="pre", positions="rope")), tokenizers)
    out = str(tmp_path / "o")
    assert main(["export", "--checkpoint", str(tmp_path / "pre"), "--format", "hf", "--output", out]) == 2
    err = capsys.readouterr().err
    assert "Marian cannot express norm pre" in err and "positions rope" in err and err.count("\n") == 1
    assert main(["export", "--checkpoint", str(lm_run), "--format", "ctranslate2", "--output", out]) == 2
    err = capsys.readouterr().err  # a language model neither Llama nor GPT-2 can express: named
    assert "none of Llama (norm_type layernorm" in err and "GPT-2 (positions sinusoidal" in err
    assert not (tmp_path / "o").exists()
    config = json.loads((tmp_path / "pre" / "config.json").read_text())
    assert config["norm"] == "pre"
