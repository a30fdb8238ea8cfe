"""``aiayn chat`` and ``aiayn.inference.chat.Chat``: the turns rendered by the model's chat template without a
second BOS, each reply what ``generate`` gives for that prompt, the oldest turns dropped (the system message
kept) when the context would overflow, Ctrl-C keeping the partial reply, /reset /system /exit, stdin scripted
line by line, and a model without a template refused in one line."""

import io
import json

import pytest

from aiayn.cli import main
from aiayn.inference.chat import Chat
from aiayn.inference.generator import TextGenerator

from conftest import chat_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return chat_checkpoint(tmp_path_factory.mktemp("chat") / "ckpt")


def test_each_reply_is_the_greedy_continuation_of_the_rendered_conversation(checkpoint):
    gen = TextGenerator.from_checkpoint(checkpoint)
    chat = Chat(gen, system="Be brief.")
    first = chat.reply("Zwei Hunde spielen.", temperature=0, max_new_tokens=6)
    prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nZwei Hunde spielen.<|im_end|>\n" \
             "<|im_start|>assistant\n"
    assert gen.chat_prompt(chat.conversation()[:2]) == prompt
    ids = gen.tokenizer.encode(prompt, add_special_tokens=False)
    assert first == gen.generate(ids, temperature=0, max_new_tokens=6)[0]
    assert [m["role"] for m in chat.messages] == ["user", "assistant"] and chat.messages[1]["content"] == first
    chat.reply("A man rides a horse.", temperature=0, max_new_tokens=6)
    assert len(chat.messages) == 4
    chat.reset()
    assert chat.messages == [] and chat.system == "Be brief."


def test_the_oldest_turns_are_dropped_when_the_context_would_overflow(tmp_path):
    gen = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "small", max_len=72))
    chat = Chat(gen, system="Be brief.")
    for text in ["What is the capital of France?", "Two dogs play.", "A man rides a horse."]:
        chat.reply(text, temperature=0, max_new_tokens=8)
    assert chat.dropped > 0 and chat.messages[-2]["content"] == "A man rides a horse."
    assert len(gen.chat_ids(chat.conversation())) <= 72
    assert chat.conversation()[0] == {"role": "system", "content": "Be brief."}
    with pytest.raises(ValueError, match="send a shorter one"):
        chat.reply("Translate to English: Ein Mann fährt ein Pferd. " * 8, temperature=0, max_new_tokens=8)
    assert chat.messages[-1]["role"] == "assistant"  # the refused message is taken back


def test_ctrl_c_stops_the_reply_and_keeps_what_came(checkpoint):
    chat = Chat(TextGenerator.from_checkpoint(checkpoint))
    seen = []

    def interrupt(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        chat.reply("Two dogs play.", interrupt, temperature=0, max_new_tokens=20, min_new_tokens=20)
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(seen)}


def test_the_command_scripts_from_stdin(checkpoint, monkeypatch, capsys):
    gen = TextGenerator.from_checkpoint(checkpoint)
    alone = gen.generate(gen.chat_ids([{"role": "user", "content": "Two dogs play."}]), temperature=0,
                         max_new_tokens=5)[0]
    lines = ("Two dogs play.\n/system Be brief.\n/nonsense\nA man rides a horse.\n/reset\n/system\n"
             "Two dogs play.\n/exit\nnever read\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["chat", "--checkpoint", str(checkpoint), "--temperature", "0", "--max-new-tokens", "5"]) == 0
    out, err = capsys.readouterr()
    second = gen.generate(gen.chat_ids([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Two dogs play."},
                                        {"role": "assistant", "content": alone},
                                        {"role": "user", "content": "A man rides a horse."}]),
                          temperature=0, max_new_tokens=5)[0]
    assert out == f"{alone}\n{second}\n{alone}\n"  # after /reset and /system: the first turn again; none after /exit
    assert "system message set" in err and "unknown command /nonsense" in err and "conversation reset" in err


def test_a_model_without_a_chat_template_is_refused_in_one_line(tmp_path, capsys):
    folder = chat_checkpoint(tmp_path / "plain", template=False)
    assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    assert main(["chat", "--checkpoint", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no chat template" in err and "aiayn generate" in err


def test_a_long_system_message_and_first_turn_come_from_files(checkpoint, tmp_path, monkeypatch, capsys):
    """``--system-file`` and ``--prompt-file``: text of many lines (which stdin would split into turns) as one
    message each; the conversation then goes on from stdin. A missing file is one line naming it."""
    system, first = "Be brief.\nAnswer in German.", "Two dogs play.\nA man rides a horse."
    (tmp_path / "system.txt").write_text(system + "\n")
    (tmp_path / "first.txt").write_text(first)
    seen, reply = [], Chat.reply

    def recorded(chat, text, *args, **kwargs):
        seen.append((chat.system, text))
        return reply(chat, text, *args, **kwargs)

    monkeypatch.setattr(Chat, "reply", recorded)
    monkeypatch.setattr("sys.stdin", io.StringIO("Thanks.\n"))
    assert main(["chat", "--checkpoint", str(checkpoint), "--system-file", str(tmp_path / "system.txt"),
                 "--prompt-file", str(tmp_path / "first.txt"), "--temperature", "0", "--max-new-tokens", "5"]) == 0
    assert seen == [(system, first), (system, "Thanks.")]
    capsys.readouterr()
    assert main(["chat", "--checkpoint", str(checkpoint), "--system-file", str(tmp_path / "none.txt")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "none.txt" in err


def test_generate_reads_its_prompt_from_a_file_and_says_what_a_long_one_lost(checkpoint, tmp_path, capsys):
    gen = TextGenerator.from_checkpoint(checkpoint)
    (tmp_path / "p.txt").write_text("Two dogs play.\nA man")
    assert main(["generate", "--checkpoint", str(checkpoint), "--prompt-file", str(tmp_path / "p.txt"),
                 "--temperature", "0", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out == gen.generate("Two dogs play.\nA man", temperature=0, max_new_tokens=4)[0] + "\n"
    (tmp_path / "long.txt").write_text("Two dogs play. " * 200)
    assert main(["generate", "--checkpoint", str(checkpoint), "--prompt-file", str(tmp_path / "long.txt"),
                 "--temperature", "0", "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert "tokens were dropped: the model's context is 256 tokens" in err


def test_turn_two_reuses_turn_ones_keys_and_values_and_answers_the_same(checkpoint):
    """A conversation keeps a prompt cache: turn n+1's prompt starts with turn n's, whose blocks it reuses; each
    reply is what a generator without a cache gives for the same prompt."""
    gen = TextGenerator.from_checkpoint(checkpoint)
    chat = Chat(gen, system="Be brief. " * 8)
    chat.reply("Two dogs play in the park.", temperature=0, max_new_tokens=6)
    assert gen.prompt_cache.stats()["prefix_hit_tokens"] == 0
    second = chat.reply("A man rides a horse.", temperature=0, max_new_tokens=6)
    ids = gen.chat_ids(chat.conversation()[:-1])
    assert gen.prompt_cache.stats()["prefix_hit_tokens"] >= 32  # the first turn's whole blocks
    plain = TextGenerator.from_checkpoint(checkpoint)
    assert plain.prompt_cache is None and second == plain.generate(ids, temperature=0, max_new_tokens=6)[0]
