"""A question asked before word for word (drafters/asked.py): the suffix drafter drafts the new reply from
the logged replies to it from the first token, as far as the new reply follows one, and only for the
whole message: a question that merely ends like a logged one, or a prompt with no chat markup, gets none."""

from __future__ import annotations

from fakes import FakeModel, HashLM, reference_greedy
from test_suffix import Past

from specchat.drafters.asked import question_end
from specchat.drafters.suffix import SuffixDrafter
from specchat.sampling import Sampler, SamplingParams
from specchat.speculative import speculative_decode
from specchat.tokenchains import LONGEST

GREEDY = Sampler(SamplingParams())
START, END, NL, USER, ASSISTANT = 30, 31, 5, 6, 7  # ChatML's markup in a tiny vocabulary


def is_control(token: int) -> bool:
    return token in (START, END)


def chat(question: list[int]) -> list[int]:
    """ChatML: <|im_start|>user\\n QUESTION <|im_end|>\\n<|im_start|>assistant\\n"""
    return [START, USER, NL, *question, END, NL, START, ASSISTANT, NL]


QUESTION = [11, 12, 13, 14, 15, 16, 17, 18]
REPLY = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 8, 9, 10, 19]


def drafter_for(*messages: list[int]) -> SuffixDrafter:
    drafter = SuffixDrafter(Past(*messages), ends_copy=is_control)
    drafter.prefill(chat(QUESTION)[:-1])  # as the loop does: the last token opens the first round
    return drafter


def test_the_question_ends_where_the_markup_of_the_reply_begins():
    prompt = chat(QUESTION)
    assert question_end(prompt[:-1], is_control) == prompt.index(END)
    llama3 = [START, USER, END, NL, *QUESTION, 32, START, ASSISTANT, END, NL]  # eot, header, role, header, \n\n
    assert question_end(llama3, lambda t: t in (START, END, 32)) == llama3.index(32)
    assert question_end(QUESTION, is_control) is None  # --no-template: no markup, no question
    assert question_end([*chat(QUESTION), 20, 21, 22], is_control) is None  # an assistant message to continue


def test_a_reply_to_the_same_question_is_drafted_from_the_first_token():
    drafter = drafter_for(QUESTION, REPLY)
    prompt = chat(QUESTION)
    assert drafter.propose(prompt, 8, GREEDY).tokens == REPLY[:8]
    assert drafter.propose([*prompt, *REPLY[:3]], 8, GREEDY).tokens == REPLY[3:11]
    assert len(drafter.offer(prompt, 8).rates) == 8
    # without the history's question a reply has nothing to match before ORDER tokens of its own
    assert SuffixDrafter(Past(REPLY), ends_copy=is_control).propose(prompt, 8, GREEDY).tokens == []


def test_the_match_is_as_deep_as_the_question_and_the_reply_so_far():
    drafter = drafter_for(QUESTION, REPLY)
    prompt = chat(QUESTION)
    assert drafter._copy_at(prompt).matched == len(QUESTION)
    assert drafter._copy_at([*prompt, *REPLY[:5]]).matched == len(QUESTION) + 5
    long_question = list(range(40, 40 + LONGEST))
    deep = SuffixDrafter(Past(long_question, REPLY), ends_copy=is_control)
    deep.prefill(chat(long_question)[:-1])
    assert deep._copy_at(chat(long_question)).matched == LONGEST


def test_only_the_whole_message_counts():
    """A logged message that ends like the question but says more, or a question that says more than a
    logged one it ends like, is another question."""
    assert drafter_for([40, *QUESTION], REPLY).propose(chat(QUESTION), 8, GREEDY).tokens == []
    longer = SuffixDrafter(Past(QUESTION, REPLY), ends_copy=is_control)
    longer.prefill(chat([40, 41, 42, *QUESTION])[:-1])
    assert longer.propose(chat([40, 41, 42, *QUESTION]), 8, GREEDY).tokens == []


def test_a_reply_that_goes_its_own_way_leaves_the_logged_one():
    drafter = drafter_for(QUESTION, REPLY)
    assert drafter.propose([*chat(QUESTION), 20, 21, 9, 9, 9], 8, GREEDY).tokens == []


def test_replies_that_differ_vote():
    other = [*REPLY[:4], 1, 2, 3, 4, 5]
    drafter = drafter_for(QUESTION, REPLY, QUESTION, other, QUESTION, REPLY)
    guess = drafter._copy_at(chat(QUESTION))
    assert guess.tokens == REPLY and guess.support[:6] == [3, 3, 3, 3, 3, 2] and guess.agree[3:5] == [3, 2]


def test_greedy_output_is_lossless_and_the_first_round_copies():
    question = QUESTION  # a question of ORDER tokens or fewer is never found: its n-gram has no follower
    prompt = chat(question)
    expected = reference_greedy(HashLM(n_vocab=40), prompt, 40)[0]
    wrong = [(t + 1) % 29 if i % 7 == 6 else t for i, t in enumerate(expected)]
    for logged in (expected, wrong):
        drafter = SuffixDrafter(Past(question, logged), ends_copy=is_control)
        rounds: list = []
        out, _ = speculative_decode(
            FakeModel(HashLM(n_vocab=40), n_vocab=40), drafter, prompt, GREEDY, k=8, max_tokens=40,
            on_round=lambda event, _stats, rounds=rounds: rounds.append(event),
        )  # fmt: skip
        assert out == expected
        if logged is expected:
            assert rounds[0].source == "suffix" and rounds[0].accepted == len(rounds[0].drafted) > 0
