"""Drafted rows in the engine's running batch: rows with their own drafts and acceptances, joining at different
steps beside plain and beam rows, verified in one pass each step, decode exactly what each decodes alone; the
tokens a row decided beyond what the batch kept wait as its pending and are never lost."""

import pytest
import torch

from aiayn import DecoderOnly, generate
from aiayn.decoding import drafted
from aiayn.decoding import engine as engine_module
from aiayn.decoding.config import DecodingConfig
from aiayn.decoding.drafted import DraftedRows
from aiayn.decoding.drafts import NGramDraft
from aiayn.decoding.engine import Engine
from aiayn.decoding.generation import rows_for
from aiayn.decoding.speculative import SpeculativeStats

from conftest import tiny

GREEDY = DecodingConfig(strategy="greedy", max_new_tokens=14, max_len_b=None)


class Oracle:
    """Guesses the main model's own greedy continuation, but every ``wrong``-th guess of a pass is wrong: rows of
    one batch then agree to different lengths."""

    def __init__(self, model, wrong: int) -> None:
        self.model, self.wrong = model, wrong

    def begin(self, inputs, room):
        pass

    def propose(self, tokens, n, sampler=None):
        truth = generate(self.model, tokens, "greedy", max_new_tokens=n, max_len_b=None)[0]
        return [(t + 1) % 29 + 1 if (j + 1) % self.wrong == 0 else t for j, t in enumerate(truth)], None

    def rollback(self, length):
        pass


@pytest.fixture(scope="module")
def lm():
    """A tiny model whose greedy text varies (weights scaled up: an untrained one repeats one token)."""
    torch.manual_seed(1)
    model = DecoderOnly(tiny(arch="decoder-only", vocab_size=30, positions="rope")).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(3)
    return model


def test_drafted_rows_beside_plain_and_beam_rows_decode_what_each_decodes_alone(lm, monkeypatch):
    """Rows that guess in a batch of several (which the server turns down: ``GUESSING_ROWS``) stay exact."""
    monkeypatch.setattr(drafted, "GUESSING_ROWS", 8)
    torch.manual_seed(3)
    prompts = [torch.randint(3, 30, (1, n)) for n in (5, 9, 3, 7, 6)]
    stats = SpeculativeStats()
    drafts = [Oracle(lm, 3), Oracle(lm, 2), NGramDraft(), Oracle(lm, 5), None]
    configs = [GREEDY] * 4 + [DecodingConfig(strategy="beam", beam_size=2, max_new_tokens=8, max_len_b=None)]
    kept = []  # the columns each verifying pass kept for the batch, and the most any row decided in it
    original = DraftedRows.commit

    def commit(self, m):
        kept.append((m, max(map(len, self._known))))
        original(self, m)

    monkeypatch.setattr(DraftedRows, "commit", commit)
    engine, groups = Engine(lm, capacity=80), []
    for prompt, draft, cfg in zip(prompts, drafts, configs, strict=True):
        group, rows, beams = rows_for(lm, prompt, cfg, draft=draft, stats=stats)
        engine.admit(group, rows, beams)
        groups.append(group)
        engine.step()
        engine.remove_done()
    engine.run()
    for prompt, group, cfg in zip(prompts, groups, configs, strict=True):
        alone = generate(lm, prompt, config=cfg)
        got = [h[0].tokens for h in group.nbest()] if cfg.strategy == "beam" else group.results()
        assert got == alone
    assert stats.accepted > 0 and stats.accepted < stats.proposed
    assert any(m < most for m, most in kept)  # rows agreed to different lengths: some decided tokens waited


def test_a_row_alone_takes_every_token_its_draft_got_right_in_one_pass(lm):
    prompt = torch.randint(3, 30, (1, 6))
    stats = SpeculativeStats()
    got = generate(lm, prompt, "greedy", max_new_tokens=20, max_len_b=None, draft=Oracle(lm, 100),
                   draft_tokens=4, speculative_stats=stats)
    assert got == generate(lm, prompt, "greedy", max_new_tokens=20, max_len_b=None)
    assert stats.accepted == stats.proposed and stats.main_passes <= 1 + -(-19 // 5)  # 5 tokens a pass


def test_rows_guess_only_while_the_batch_has_one_row(lm, monkeypatch):
    seen = []  # (rows in the batch, tokens guessed) of each step

    def tails(engine):
        got = drafted.drafted_tails(engine)
        seen.append((engine.tokens.size(0), sum(map(len, got or []))))
        return got

    monkeypatch.setattr(engine_module, "drafted_tails", tails)
    prompts, limits = [torch.randint(3, 30, (1, 6)) for _ in range(2)], (4, 20)
    stats = SpeculativeStats()
    engine, groups = Engine(lm, capacity=80), []
    for prompt, limit in zip(prompts, limits, strict=True):
        cfg = GREEDY.replace(max_new_tokens=limit)
        group, rows, beams = rows_for(lm, prompt, cfg, draft=Oracle(lm, 100), stats=stats)
        engine.admit(group, rows, beams)
        groups.append((group, cfg))
    engine.run()
    alone = [generate(lm, p, config=c) for p, (_, c) in zip(prompts, groups, strict=True)]
    assert [g.results() for g, _ in groups] == alone
    assert all(guessed == 0 for rows, guessed in seen if rows > 1) and seen[0][0] == 2
    assert any(guessed > 0 for rows, guessed in seen if rows == 1)  # alone once the short one left


@pytest.mark.parametrize("options", [{"repetition_penalty": 1.8}, {"frequency_penalty": 1.5, "presence_penalty": 0.5},
                                     {"logit_bias": {5: 4.0, 9: -100.0}}])
def test_penalties_and_biases_judge_drafted_tokens_as_plain_decoding_would(lm, options):
    """Each drafted position is scored as if the drafted tokens before it were kept (``Penalties.along``): the
    text is plain greedy's under the same penalties, though the drafts guess the unpenalised text."""
    prompts = torch.randint(3, 30, (3, 7))
    plain = generate(lm, prompts, "greedy", max_new_tokens=16, max_len_b=None, **options)
    assert plain != generate(lm, prompts, "greedy", max_new_tokens=16, max_len_b=None)
    for draft in (Oracle(lm, 4), NGramDraft()):
        stats = SpeculativeStats()
        got = generate(lm, prompts, "greedy", max_new_tokens=16, max_len_b=None, draft=draft,
                       speculative_stats=stats, **options)
        assert got == plain and stats.proposed > 0


class Knowing:
    """Guesses the continuation of a known text (the plain output), every ``wrong``-th guess of a pass another
    token."""

    def __init__(self, text: list[int], start: int, wrong: int) -> None:
        self.text, self.start, self.wrong = text, start, wrong

    def begin(self, inputs, room):
        pass

    def propose(self, tokens, n, sampler=None):
        ahead = self.text[tokens.size(1) - self.start:][:n]
        return [t + 1 if (j + 1) % self.wrong == 0 else t for j, t in enumerate(ahead)], None

    def rollback(self, length):
        pass


def test_a_grammar_judges_each_drafted_position_as_after_the_guesses_before_it(tmp_path):
    """A JSON schema with a draft: each position is masked as the matcher allows it after the guesses before it
    (then rolled back); guesses it refuses are never kept; the text is plain constrained greedy's."""
    from aiayn.inference.generator import TextGenerator

    from conftest import chat_checkpoint

    generator = TextGenerator.from_checkpoint(chat_checkpoint(tmp_path / "ckpt"))
    schema = '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'
    ids = torch.tensor([generator.prompt_ids("Where? ")])
    ask = dict(max_new_tokens=40, json_schema=schema, grammars=generator.grammars)
    plain = generate(generator.model, ids, "greedy", **ask)
    for wrong in (2, 3, 100):
        stats = SpeculativeStats()
        got = generate(generator.model, ids, "greedy", draft=Knowing(plain[0], ids.size(1), wrong),
                       speculative_stats=stats, **ask)
        assert got == plain and stats.accepted > 0
    sampled = generate(generator.model, ids, "sample", seed=1, draft="ngram", temperature=1.5, **ask)
    assert generator.tokenizer.decode(sampled[0]).startswith("{")


def test_several_samples_a_prompt_are_drafted_each_drawn_on(lm):
    prompts = torch.randint(3, 30, (2, 6))
    stats = SpeculativeStats()
    got = generate(lm, prompts, "sample", temperature=1.5, seed=2, num_return_sequences=3, max_new_tokens=12,
                   max_len_b=None, draft=Oracle(lm, 3), speculative_stats=stats)
    assert len(got) == 6 and all(len(ids) <= 12 for ids in got) and stats.proposed > 0
    assert len({tuple(ids) for ids in got[:3]}) > 1  # the first prompt's three samples are other draws
