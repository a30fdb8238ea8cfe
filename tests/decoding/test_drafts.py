"""The drafts of speculative decoding (decoding/drafts.py): prompt lookup finds the latest earlier repeat of the
row's last tokens; the draft length follows the acceptance and rests while drafting does not pay."""

import pytest
import torch

from aiayn.decoding.drafts import DraftLength, NGramDraft


def test_prompt_lookup_drafts_what_followed_the_latest_earlier_repeat_of_the_longest_tail():
    draft = NGramDraft(max_ngram=3)
    row = torch.tensor([[7, 1, 2, 3, 9, 1, 2, 3, 5, 6, 1, 2, 3]])
    assert draft.propose(row, 2) == ([5, 6], None)  # (1, 2, 3) last seen before the tail at 5: then 5, 6 (not 9)
    assert draft.propose(row, 10)[0] == [5, 6, 1, 2, 3]  # up to the row's end
    assert draft.propose(torch.tensor([[4, 8, 4, 2]]), 3)[0] == []  # no earlier 2 (nor 4, 2 or 8, 4, 2)
    assert draft.propose(torch.tensor([[4, 8, 5, 4]]), 3)[0] == [8, 5, 4]  # a 1-gram when no longer one repeats
    assert NGramDraft(min_ngram=2).propose(torch.tensor([[4, 8, 5, 4]]), 3)[0] == []
    assert draft.propose(row, 0)[0] == [] and draft.propose(torch.tensor([[3]]), 4)[0] == []
    with pytest.raises(ValueError, match="min_ngram"):
        NGramDraft(max_ngram=1, min_ngram=2)


def test_the_draft_length_grows_on_acceptance_shrinks_on_rejection_and_rests_when_it_does_not_pay():
    length = DraftLength()
    assert length.next() == 4
    length.update(4, 4)
    assert length.next() == 6
    length.update(6, 3)
    assert length.next() == 5
    for _ in range(DraftLength.PATIENCE):  # passes that kept less than 30% of their draft
        length.update(length.next(), 0)
    assert [length.next() for _ in range(5)] == [0, 0, 0, 0, 1]  # 4 plain steps, then a probe of 1
    for _ in range(DraftLength.PATIENCE):
        length.update(length.next(), 0)
    assert [length.next() for _ in range(9)] == [0] * 8 + [1]  # the rest doubles
    length.update(1, 1)  # a draft that is kept again: the next rest is short again
    assert length.rest == 4 and length.next() == 3
    fixed = DraftLength(2)
    fixed.update(2, 0)
    fixed.update(2, 0)
    assert [fixed.next() for _ in range(6)] == [2] * 6  # a length asked for is kept
    with pytest.raises(ValueError, match="draft_tokens"):
        DraftLength(0)


def test_a_prophecy_is_drafted_in_place_and_taken_up_again_after_the_output_leaves_it():
    from aiayn.decoding.drafts import ProphetDraft

    draft = ProphetDraft.__new__(ProphetDraft)  # (its model's translation set by hand)
    draft.target, draft.most_ngram = [10, 11, 12, 13, 11, 12, 14, 15], 3
    bos = 1
    assert draft.propose(torch.tensor([[bos, 10]]), 3) == ([11, 12, 13], None)  # first asked after one token
    assert draft.propose(torch.tensor([[bos]]), 3) == ([10, 11, 12], None)  # the start: the prophecy's first
    assert draft.propose(torch.tensor([[bos, 10, 11]]), 2) == ([12, 13], None)  # still on it
    # the output said 9 where the prophecy says 12, then 13: taken up after 13, not after the earlier 11, 12
    assert draft.propose(torch.tensor([[bos, 10, 11, 9, 13]]), 2) == ([11, 12], None)
    # only "12" is found, twice: the occurrence nearest the output's length (6) goes on with 14, not with 13
    assert draft.propose(torch.tensor([[bos, 10, 11, 12, 13, 7, 12]]), 2) == ([14, 15], None)
    assert draft.propose(torch.tensor([[bos, 10, 99]]), 2) == ([], None)  # nothing of it to follow
