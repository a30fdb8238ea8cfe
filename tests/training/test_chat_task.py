"""``--task chat``: conversations from a JSON-lines file, rendered by the model's chat template, trained with the
loss on the assistant's turns only (their end-of-turn included); bad lines are named; a LoRA run from a chat
checkpoint saves an adapter that ``aiayn chat`` and ``merge`` take."""

import json

import pytest
import torch
from safetensors.torch import load_file

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.training.chat import ChatTask, assistant_labelled, read_conversations

from conftest import chat_checkpoint

CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Zwei Hunde spielen."},
     {"role": "assistant", "content": "Two dogs play."}, {"role": "user", "content": "Ein Mann fährt ein Pferd."},
     {"role": "assistant", "content": "A man rides a horse."}],
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris is the capital of France."}],
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return chat_checkpoint(tmp_path_factory.mktemp("chat") / "ckpt")


def test_only_the_assistant_turns_and_their_end_of_turn_are_labelled(checkpoint):
    _, tokenizers = load_checkpoint(checkpoint)
    ids, own = assistant_labelled(tokenizers, CONVERSATIONS[0])
    whole = tokenizers.apply_chat_template(CONVERSATIONS[0], add_generation_prompt=False)
    assert tokenizers.src.tok.decode(ids, skip_special_tokens=False) == whole
    spans, current = [], []
    for token, mine in zip(ids, own, strict=True):
        if mine:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    spans += [current] if current else []
    texts = [tokenizers.src.tok.decode(span, skip_special_tokens=False) for span in spans]
    assert texts == ["Two dogs play.<|im_end|>\n", "A man rides a horse.<|im_end|>\n"]


def test_the_task_masks_everything_but_the_assistant(checkpoint, tmp_path):
    model, tokenizers = load_checkpoint(checkpoint)
    lines = [json.dumps({"messages": c}) for c in CONVERSATIONS]
    task = ChatTask(lines, tokenizers, model.config, max_len=256, max_tokens=512, seed=0)
    ids, labels = task.collate([0, 1])
    assert ids.shape == labels.shape
    kept = labels != model.config.pad_id
    assert kept.sum() == sum(sum(own) for own in (assistant_labelled(tokenizers, c)[1] for c in CONVERSATIONS))
    loss, n = task.loss(model, (ids, labels), 0.0)
    assert n == int(kept[:, 1:].sum()) and torch.isfinite(loss)
    short = ChatTask(lines, tokenizers, model.config, max_len=50, max_tokens=512, seed=0)
    assert short.too_long == 1 and len(short) == 1


@pytest.mark.parametrize("line, message", [
    ("not json", ":2: not valid JSON"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', ":2: no assistant message"),
    ('{"messages": [{"role": "robot", "content": "hi"}]}', ":2: each message needs a role"),
    ('{"text": "hi"}', ":2: expected"),
])
def test_bad_lines_are_named(tmp_path, line, message):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"messages": CONVERSATIONS[1]}) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=message):
        read_conversations(path)


def test_a_lora_run_on_conversations_saves_an_adapter_that_chat_and_merge_take(checkpoint, tmp_path, capsys,
                                                                               monkeypatch):
    import io

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS * 8))
    run = tmp_path / "run"
    assert main(["train", "--task", "chat", "--init-from", str(checkpoint), "--data", str(data), "--lora-r", "4",
                 "--max-steps", "4", "--eval-every", "4", "--max-tokens", "256", "--schedule", "constant", "--lr",
                 "1e-2", "--warmup", "1", "--device", "cpu", "--output", str(run)]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("valid_loss" in m for m in metrics)
    assert (run / "best" / "adapter_config.json").is_file()
    monkeypatch.setattr("sys.stdin", io.StringIO("Two dogs play.\n"))
    capsys.readouterr()
    assert main(["chat", "--checkpoint", str(checkpoint), "--adapter", str(run / "best"), "--temperature", "0",
                 "--max-new-tokens", "4"]) == 0
    adapted = capsys.readouterr().out
    assert main(["merge", "--checkpoint", str(checkpoint), "--adapter", str(run / "best"), "--output",
                 str(tmp_path / "merged")]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("Two dogs play.\n"))
    capsys.readouterr()
    assert main(["chat", "--checkpoint", str(tmp_path / "merged"), "--temperature", "0", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out == adapted
    base, merged = (load_file(folder / "model.safetensors") for folder in (checkpoint, tmp_path / "merged"))
    moved = max((merged[name] - base[name]).abs().max().item() for name in base)
    assert moved > 1e-3, moved  # the adapter trained: merged into the base, it changes the weights


def test_chat_needs_a_checkpoint_to_start_from(tmp_path, capsys):
    assert main(["train", "--task", "chat", "--data", str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "r")]) == 2
    assert "give init_from" in capsys.readouterr().err
