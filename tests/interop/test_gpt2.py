"""Importing Hugging Face GPT-2 checkpoints: logits, greedy continuation and tokenizer ids equal to the
Hugging Face model's; the imported checkpoint generates and serves like any language model."""

import json

import pytest
import torch

from aiayn import generate
from aiayn.cli import main
from aiayn.inference.generator import TextGenerator

SENTENCES = ["A man rides a horse.", "Zwei Hunde spielen im Schnee.", "一个男人骑着马。", "  spaces  and\ttabs\n",
             "Ünïcödé ß ẞ 🐎", "<|endoftext|>A new document", ""]


@pytest.fixture(scope="module")
def imported(gpt2, import_hf):
    return import_hf(gpt2[0])


def test_tokenizer_ids_equal_hugging_face(gpt2, imported, same_ids):
    (_, tokenizers), _ = imported
    same_ids(tokenizers.src, tokenizers.src, gpt2[2], SENTENCES)


def test_logits_equal_on_a_padded_batch(gpt2, imported):
    _, hf, tok = gpt2
    (model, _), _ = imported
    rows = [tok(t).input_ids for t in SENTENCES[:3]]
    width = max(map(len, rows))
    pad = model.config.pad_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # (B, T) right-padded with aiayn's pad
    real = ids != pad
    with torch.no_grad():
        ref = hf(input_ids=ids.masked_fill(~real, 0), attention_mask=real.long()).logits  # (B, T, V)
        ours = model.eval()(ids)[..., : ref.size(-1)]  # the appended padding row is not GPT-2's
    assert (ref - ours)[real].abs().max() <= 1e-4
    assert json.loads((imported[1] / "config.json").read_text())["vocab_size"] == ref.size(-1) + 1


def test_greedy_continuation_equals_hugging_face_generate(gpt2, imported):
    _, hf, tok = gpt2
    (model, _), folder = imported
    for prompt in SENTENCES[:3]:
        ids = tok(prompt, return_tensors="pt").input_ids
        ref = hf.generate(ids, max_new_tokens=15, do_sample=False, pad_token_id=tok.eos_token_id)[0, ids.size(1):]
        ref = ref.tolist()
        if tok.eos_token_id in ref:
            ref = ref[: ref.index(tok.eos_token_id)]
        assert generate(model.eval(), ids, "greedy", max_new_tokens=15)[0] == ref, prompt
        text = TextGenerator.from_checkpoint(folder).generate(prompt, 15, temperature=0)[0]
        assert text == tok.decode(ref, skip_special_tokens=True)


def test_config_gpt2_cannot_express_is_refused(gpt2, tmp_path, capsys):
    import shutil

    folder, _, _ = gpt2
    copy = tmp_path / "g"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "scale_attn_by_inverse_layer_idx": True}))
    assert main(["import", str(copy), "--output", str(tmp_path / "out")]) == 2
    assert "scale_attn_by_inverse_layer_idx is not supported" in capsys.readouterr().err
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "tokenizer.json").unlink()
    assert main(["import", str(copy), "--output", str(tmp_path / "out")]) == 2
    assert "tokenizer.json: missing" in capsys.readouterr().err


def test_the_imported_model_serves_with_continuous_batching(imported):
    from fastapi.testclient import TestClient

    from aiayn.serve.server import create_app

    _, folder = imported
    generator = TextGenerator.from_checkpoint(folder)
    with TestClient(create_app(generator)) as client:
        for prompt in ("A man", "Zwei Hunde spielen"):
            answer = client.post("/generate", json={"prompt": prompt, "max_new_tokens": 10, "temperature": 0})
            assert answer.json()["text"] == generator.generate(prompt, 10, temperature=0)[0]
        attention = client.post("/attention", json={"text": "A man rides"}).json()
        assert len(attention["tokens"]) == len(generator.tokenizer.encode("A man rides"))
