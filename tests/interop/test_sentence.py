"""Encoder checkpoints as embedders: BertModel folders and sentence-transformers folders (both pooling-config
forms, 2_Normalize) import; ``Embedder``, ``aiayn embed`` and ``POST /embed`` give the vectors
``SentenceTransformer.encode`` gives, within 1e-5; bad folders are one line, exit 2, nothing written."""

import json
import shutil

import numpy as np
import pytest
import torch

from aiayn import Embedder
from aiayn.cli import main

TEXTS = ["a man rides a horse.", "zwei hunde spielen im schnee.", "a woman reads a book.",
         "kinder lachen. " * 12, "一个男人骑着马。"]


@pytest.fixture(scope="module")
def base(tmp_path_factory, bert):
    """A BertModel folder (no masked-LM head): the BERT fixture's encoder, every weight random."""
    from transformers import BertModel

    folder, _, tok = bert
    out = tmp_path_factory.mktemp("bertmodel") / "base"
    model = BertModel.from_pretrained(folder, add_pooling_layer=True).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _st_folder(base, out, mode, normalize, legacy=False, max_seq_length=16):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(base), max_seq_length=max_seq_length)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=mode)
    st = SentenceTransformer(modules=[transformer, pooling, *([models.Normalize()] if normalize else [])])
    st.save(str(out))
    if legacy:  # the form sentence-transformers 2.x wrote, which released models still carry
        config = out / "1_Pooling" / "config.json"
        keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
        config.write_text(json.dumps({"word_embedding_dimension": 16, **{k: k == keys[mode] for k in keys.values()}}))
        (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                   "do_lower_case": False}))
    return SentenceTransformer(str(out))


@pytest.mark.parametrize("mode, normalize, legacy", [("mean", False, False), ("mean", True, True),
                                                     ("cls", True, False), ("cls", False, True),
                                                     ("max", False, False), ("max", True, True)])
def test_embeddings_equal_sentence_transformers(tmp_path, base, mode, normalize, legacy):
    st = _st_folder(base, tmp_path / "st", mode, normalize, legacy)
    assert main(["import", str(tmp_path / "st"), "--output", str(tmp_path / "ckpt")]) == 0
    embedder = Embedder.from_checkpoint(tmp_path / "ckpt")
    assert (embedder.pooling.mode, embedder.pooling.normalize, embedder.pooling.max_seq_length) == (mode, normalize, 16)
    theirs = torch.tensor(st.encode(TEXTS))
    ours = embedder.embed(TEXTS)
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() <= 1e-5
    cosine = lambda v: torch.nn.functional.normalize(v, dim=-1) @ torch.nn.functional.normalize(v, dim=-1).T  # noqa: E731
    assert (cosine(ours) - cosine(theirs)).abs().max() <= 1e-5


def test_a_tokenizer_file_that_pads_to_128_embeds_as_sentence_transformers(tmp_path, base):
    """all-MiniLM-L6-v2's tokenizer.json pads every text to 128: the padding ids must not be pooled as words."""
    _st_folder(base, tmp_path / "st", "mean", True)
    spec = json.loads((tmp_path / "st" / "tokenizer.json").read_text(encoding="utf-8"))
    spec["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "[PAD]"}
    (tmp_path / "st" / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "st"))
    assert main(["import", str(tmp_path / "st"), "--output", str(tmp_path / "ckpt")]) == 0
    ours, theirs = Embedder.from_checkpoint(tmp_path / "ckpt").embed(TEXTS), torch.tensor(st.encode(TEXTS))
    assert (ours - theirs).abs().max() <= 1e-5


def test_a_bert_model_folder_imports_and_mean_pools(tmp_path, base):
    from transformers import AutoTokenizer, BertModel

    assert main(["import", str(base), "--output", str(tmp_path / "ckpt")]) == 0
    hf, tok = BertModel.from_pretrained(base).eval(), AutoTokenizer.from_pretrained(base)
    batch = tok(TEXTS[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = hf(**batch).last_hidden_state
    mask = batch.attention_mask[..., None].float()
    expected = (states * mask).sum(1) / mask.sum(1)
    ours = Embedder.from_checkpoint(tmp_path / "ckpt").embed(TEXTS[:3])
    assert (ours - expected).abs().max() <= 1e-5


def test_embed_command_and_endpoint(tmp_path, base, capsys):
    from fastapi.testclient import TestClient

    from aiayn.inference.embed import Pooling
    from aiayn.inference.fill_mask import MaskFiller
    from aiayn.inference.load import load_checkpoint
    from aiayn.serve.server import create_app

    _st_folder(base, tmp_path / "st", "mean", True)
    ckpt = tmp_path / "ckpt"
    assert main(["import", str(tmp_path / "st"), "--output", str(ckpt)]) == 0
    expected = Embedder.from_checkpoint(ckpt).embed(TEXTS)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    assert main(["embed", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "v.npy")]) == 0
    array = np.load(tmp_path / "v.npy")
    assert array.dtype == np.float32 and torch.allclose(torch.from_numpy(array), expected, atol=1e-6)
    capsys.readouterr()
    assert main(["embed", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.txt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert torch.allclose(torch.tensor([json.loads(line) for line in lines]), expected, atol=1e-6)
    assert main(["embed", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "v.npy")]) == 2  # a file aiayn did not write... is refused without --overwrite
    model, tokenizers = load_checkpoint(ckpt)
    app = create_app(MaskFiller(model, tokenizers), embedder=Embedder(model, tokenizers, Pooling.load(ckpt)))
    with TestClient(app, raise_server_exceptions=False) as client:
        body = client.post("/embed", json={"texts": TEXTS}).json()
        assert body["dimension"] == 16 and body["pooling"] == "mean" and body["normalized"] is True
        assert torch.allclose(torch.tensor(body["embeddings"]), expected, atol=1e-6)
        assert client.post("/embed", json={"texts": []}).status_code == 422
        assert client.post("/embed", json={"texts": ["x" * 5000]}).status_code == 413
        assert client.post("/embed", json={"text": "a"}).status_code == 422


def _break(folder, how):
    if how == "unknown pooling mode":
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 16,
                                                                      "pooling_mode": "attention"}))
    elif how == "two pooling modes":
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                      "pooling_mode_mean_tokens": True}))
    elif how == "a Dense module":
        modules = json.loads((folder / "modules.json").read_text())
        modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))
    elif how == "missing pooling config":
        shutil.rmtree(folder / "1_Pooling")


@pytest.mark.parametrize("how, message", [
    ("unknown pooling mode", "pooling mode attention is not supported"),
    ("two pooling modes", "pooling mode cls + mean is not supported"),
    ("a Dense module", "modules Transformer, Pooling, Normalize, Dense; aiayn imports one Transformer"),
    ("missing pooling config", "1_Pooling/config.json: missing"),
])
def test_bad_sentence_transformers_folders(tmp_path, base, capsys, how, message):
    _st_folder(base, tmp_path / "st", "mean", True)
    _break(tmp_path / "st", how)
    capsys.readouterr()
    assert main(["import", str(tmp_path / "st"), "--output", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "ckpt").exists()
