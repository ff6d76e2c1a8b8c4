"""The suffix drafter: its proposals are exactly the lookup's, its confidence follows the votes, it is
lossless against the fake models, and `--mode suffix` drafts from the logged history (fake backend)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_backend import REPLY
from fakes import FakeModel, HashLM, reference_greedy
from typer.testing import CliRunner

from specchat.cli import app
from specchat.drafters import Draft, Outcome
from specchat.drafters.suffix import SuffixDrafter, _majority, lookup
from specchat.sampling import Sampler, SamplingParams
from specchat.speculative import speculative_decode
from specchat.tokenchains import LONGEST, SEP, GrowingChains

GREEDY = Sampler(SamplingParams())


class Past:
    """A stand-in for history.History: fixed chains, updates counted."""

    def __init__(self, *messages: list[int]) -> None:
        self.chains = GrowingChains(bits=12)
        for message in messages:
            self.chains.append(np.array([*message, SEP]))
        self.updates = 0

    def update(self) -> None:
        self.updates += 1


def test_copies_from_the_conversation():
    drafter = SuffixDrafter()
    assert drafter.propose([7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1], 5, GREEDY).tokens == [2, 3, 4, 5, 6]
    assert drafter.propose([1, 2, 3], 5, GREEDY).tokens == []  # a new conversation, nothing to copy
    assert drafter.propose([1, 2, 3, 4, 1, 2, 3, 4], 0, GREEDY).tokens == []


def test_proposals_are_exactly_the_lookup():
    rng = np.random.default_rng(3)
    phrases = [list(rng.integers(10, 20, 12)) for _ in range(4)]
    past = Past(*[phrases[i % 4] + list(rng.integers(10, 20, 6)) for i in range(30)])
    drafter = SuffixDrafter(past, ends_copy=lambda token: token == 19)
    context: list[int] = list(rng.integers(10, 20, 5))
    drafter.prefill(context)
    for step in range(60):
        context += phrases[step % 4][: 1 + step % 7]
        conversation = GrowingChains(bits=16)  # a fresh index of the same text
        conversation.append(np.array(context))
        guess = lookup([conversation, past.chains], context, 64)
        cut = next((i for i, t in enumerate(guess.tokens) if t == 19), len(guess.tokens))
        assert drafter.propose(context, 8, GREEDY).tokens == guess.tokens[:cut][:8]
        assert len(drafter.offer(context, 8).rates) == min(8, cut)
    assert past.updates == 1  # once per reply, at prefill


def test_confidence_follows_the_votes():
    agreeing = SuffixDrafter(Past(*[[1, 2, 3, 4, 5, 6, 7, 8]] * 6))
    split = SuffixDrafter(Past([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 9], [1, 2, 3, 4, 5, 7], [1, 2, 3, 4, 6]))
    context = [0, 0, 1, 2, 3, 4]
    strong, weak = agreeing.offer(context, 4), split.offer(context, 4)
    assert agreeing.propose(context, 4, GREEDY).tokens == [5, 6, 7, 8]
    assert split.propose(context, 4, GREEDY).tokens == [5, 7]  # 5 (3 of 4), then a three-way tie: the latest
    assert all(s > w for s, w in zip(strong.rates, weak.rates, strict=False))
    assert weak.rates[1] < weak.rates[0]  # one vote of three is weaker evidence than three of four
    assert strong.proven >= 4 and all(r <= m for r, m in zip(strong.rates, strong.mean, strict=True))


def test_positions_two_earlier_matches_agree_on_are_vouched_for():
    """VOUCH = 2: a passage seen answered the same way twice is vouched for as far as both agree (past
    the first-copy cap of 7); one earlier match vouches for nothing beyond that cap."""
    message = list(range(40, 70))
    context = [0, 0, *message[:6]]
    twice = SuffixDrafter(Past(message, message)).offer(context, 16)
    once = SuffixDrafter(Past(message)).offer(context, 16)
    assert len(twice.rates) == len(once.rates) == 16
    assert twice.proven == 16 and once.proven == 7


def test_a_context_that_differs_at_the_end_of_the_indexed_part_is_another_conversation():
    """Same first 16 tokens, another middle: the old conversation's tokens must not be copied from."""
    drafter = SuffixDrafter()
    start = list(range(1, 17))
    drafter.propose([*start, *range(100, 124)], 4, GREEDY)  # indexes this conversation
    other = [*start, *range(200, 224), 100, 101, 102, 103]  # 100..103 never occurred before in it
    assert drafter.propose(other, 4, GREEDY).tokens == []


def test_a_match_only_in_past_conversations_is_judged_as_a_short_copy():
    """A long match in this conversation is a copy (prior of a long match); the same match found only in
    a past conversation counts as one of PAST_MATCH tokens, learned apart: replies share stock phrases."""
    text = list(range(40, 70))
    here, past = SuffixDrafter(), SuffixDrafter(Past(text))
    context = [1, 2, *text[:24]]
    in_text = here.offer([*text, 9, *text[:24]], 4)
    from_past = past.offer(context, 4)
    assert past.propose(context, 4, GREEDY).tokens == text[24:28]
    assert all(p < t for p, t in zip(from_past.rates, in_text.rates, strict=True))
    past.learn(Outcome(len(context), Draft(), 0, [text[24]], 0.01))
    assert sum(past.past_odds.tried.values()) == 1 and not past.odds.tried


def test_a_past_conversation_the_reply_keeps_following_earns_the_odds_of_its_copies():
    """One past conversation (one vote) is judged by the vote formula at first; once this reply has
    reproduced it for LONGEST tokens and its copies of past matches have held many times, by the
    cautious odds they earned, which are higher. A shorter past match (a stock phrase) and a match that
    a second conversation contradicts keep the vote formula."""
    text = list(range(40, 100))
    following, phrase = [1, 2, *text[: LONGEST + 4]], [1, 2, *text[:24]]
    drafter = SuffixDrafter(Past(text))
    before = drafter.offer(following, 4).rates
    for _ in range(80):
        drafter.past_odds.observe(5, True)
    after = drafter.offer(following, 4)
    learned = drafter.past_odds.rate(5)
    assert after.rates == pytest.approx([learned] * 4) and learned > max(before) + 0.05
    assert all(r <= m for r, m in zip(after.rates, after.mean, strict=True))
    assert max(drafter.offer(phrase, 4).rates) < learned - 0.02
    split = SuffixDrafter(Past(text, [*text[: LONGEST + 6], 99, 98]))
    for _ in range(80):
        split.past_odds.observe(5, True)
    offer = split.offer(following, 4)
    assert offer.rates[1] == pytest.approx(learned) and offer.rates[2] < learned  # 2 of 2 agree, then 1 of 2


def test_learning_books_the_guess():
    drafter = SuffixDrafter()
    context = [5, 6, 7, 8, 9, 1, 5, 6, 7, 8]
    guess = drafter.propose(context, 4, GREEDY)
    drafter.offer(context, 4)
    drafter.learn(Outcome(len(context), guess, 1, [9, 2], 0.01))
    assert sum(drafter.odds.tried.values()) == 2 and sum(drafter.odds.held.values()) == 1


def hash_target(prompt, n):
    return reference_greedy(HashLM(n_vocab=32), prompt, n)[0]


@pytest.mark.parametrize("k", [1, 3, 8, 16])
@pytest.mark.parametrize("history", ["right", "wrong", "none"])
def test_greedy_output_is_lossless(k, history):
    """Whatever the history says (the target's own earlier reply, or a corrupted one), the output is the
    target's; a right history is accepted."""
    prompt = [5, 9, 2, 17, 3, 3]
    expected = hash_target(prompt, 60)
    wrong = [(t + 1) % 32 if i % 5 == 4 else t for i, t in enumerate(expected)]
    past = {"right": Past(prompt + expected), "wrong": Past(prompt + wrong, prompt + wrong), "none": None}[history]
    target = FakeModel(HashLM(n_vocab=32), n_vocab=32)
    out, stats = speculative_decode(target, SuffixDrafter(past), prompt, GREEDY, k=k, max_tokens=60)
    assert out == expected
    if history == "right":
        assert stats.accepted == stats.drafted >= 30 and stats.rounds == stats.rounds_by_source["suffix"]


def test_run_mode_suffix_drafts_from_the_logged_history(fake_models, private_log):
    target, _draft = fake_models
    prompt = "List the planets of the solar system, in order from the sun."

    def run(*extra: str) -> dict:
        result = CliRunner().invoke(app, ["run", "--target", str(target), "--mode", "suffix", "--json", *extra, prompt])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first, second = run(), run()
    assert first["text"] == second["text"] == REPLY.format(prompt=prompt)
    assert first["mode"] == "suffix" and second["stats"]["rounds"] < first["stats"]["rounds"]
    assert (private_log / "history").is_dir()
    alone = run("--no-history")
    assert alone["stats"]["rounds"] == first["stats"]["rounds"]  # this conversation only, as the first time


ANSWER = (
    "Jupiter has four large moons found by Galileo: Io, Europa, Ganymede and Callisto. Pioneer 10 and 11 "
    "flew past first, then the two Voyagers, Galileo orbited it for eight years, and Juno is there now."
)


@pytest.mark.parametrize("costs", ["gpu", "cpu"])
def test_auto_drafts_from_the_logged_history(isolated, seed_tuning, costs):
    """auto takes the suffix drafter as one more arm where a history exists: a reply logged before is
    drafted from it (same text), and --no-history leaves auto without that arm, as the bench's default.
    The answer is not in the prompt, so prompt lookup cannot copy it; every eval call sleeps, so that a
    batch really is cheaper than its tokens one by one and the guard's clock agrees with the costs."""
    import fake_backend

    from specchat import tunemeasure
    from specchat.costmodel import Costs

    target, draft = fake_backend.write_pair(isolated / "files", agree=0.0, reply=ANSWER, eval_sleep=0.002)
    if costs == "cpu":  # batches dear, a draft step 0.5: only long, sure copies pay
        seed_tuning(target, draft, Costs({n: n**0.8 for n in tunemeasure.QUICK_BATCHES}, 0.5, 1e-3, 1e-3), mode="auto")
    else:
        seed_tuning(target, draft, mode="auto")
    prompt = "Tell me about the moons of Jupiter and the missions that visited them."

    def run(*extra: str) -> dict:
        args = ["run", "--target", str(target), "--draft", str(draft), "--json", *extra, prompt]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first, second, alone = run(), run(), run("--no-history")
    assert first["text"] == second["text"] == alone["text"] == ANSWER
    assert second["stats"]["rounds_by_source"].get("suffix", 0) > 0
    assert second["stats"]["rounds"] < first["stats"]["rounds"] / 3
    assert "suffix" not in alone["stats"]["rounds_by_source"]


@pytest.mark.parametrize("bits", [3, 16])  # 3 bits: most n-grams share a bucket, so links chain across them
def test_appending_one_token_at_a_time_links_as_appending_all_at_once(bits):
    rng = np.random.default_rng(bits)
    text = rng.integers(0, 12, 400)
    text[rng.random(400) < 0.05] = SEP  # message boundaries, also right at the start
    text[0] = SEP
    whole, one_by_one = GrowingChains(bits=bits), GrowingChains(bits=bits)
    whole.append(text)
    for token in text:
        one_by_one.append(np.array([token]))
    assert one_by_one.total == whole.total == len(text)
    assert one_by_one.tokens[: len(text)].tolist() == whole.tokens[: len(text)].tolist()
    assert one_by_one.prev[: len(text)].tolist() == whole.prev[: len(text)].tolist()
    assert one_by_one.head.tolist() == whole.head.tolist()
    assert whole.prev[: len(text)].any()  # the text repeats n-grams: there are links to compare


# -- mutants that survived the fast suite (hand-made mutation testing, session 32) -----------------


def test_after_a_vote_only_the_matches_that_agreed_go_on_voting():
    rows = np.array([[5, 6]] * 3 + [[7, 9]] * 2 + [[8, 9]] * 2)
    guess = _majority(rows, 2, 4)
    assert (guess.tokens, guess.support, guess.agree) == ([5, 6], [7, 3], [3, 3])


def test_a_context_that_differs_inside_the_indexed_part_is_another_conversation():
    drafter = SuffixDrafter()
    drafter.prefill([1, 2, 3, 4])
    drafter.prefill([1, 9, 3, 4, 5])
    assert drafter.conversation.tokens[: drafter.conversation.total].tolist() == [1, 9, 3, 4, 5]


def test_an_outcome_at_another_place_books_nothing():
    drafter = SuffixDrafter()
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6]
    draft = drafter.propose(context, 3, GREEDY)
    assert draft.tokens
    drafter.learn(Outcome(len(context) + 1, draft, 3, [*draft.tokens, 9], 0.0))
    assert drafter.odds.tried == {}


def test_agreeing_matches_that_end_together_propose_no_end_marker():
    """Every match goes on the same way to the end of its message: the run stops there."""
    drafter = SuffixDrafter(Past(*[[1, 2, 3, 4, 5, 6, 7, 8]] * 3))
    assert drafter.propose([0, 0, 1, 2, 3, 4], 8, GREEDY).tokens == [5, 6, 7, 8]


@pytest.mark.parametrize(("logged", "proven"), [(1, 7), (2, 16)])
def test_a_logged_copy_of_this_conversations_turn_does_not_vote_again(logged, proven):
    """The conversation's first message is matched in it and, logged, in the history: that is one
    match, which vouches for nothing past the first-copy cap (7). The same message in another past
    conversation is a second match that agrees (VOUCH = 2): one turn of this conversation cancels one
    logged copy, not both."""
    message = list(range(40, 70))
    context = [*message, 99, *message[:6]]
    offer = SuffixDrafter(Past(*[message] * logged)).offer(context, 16)
    assert len(offer.rates) == 16 and offer.proven == proven


def test_a_logged_copy_that_ends_within_the_tokens_compared_is_still_known_for_one():
    """The turn's logged copy ends (its end marker) 4 tokens after the match, where the conversation
    goes on: only its own tokens are compared, and it does not vote beside the turn itself."""
    message = list(range(40, 50))
    context = [*message, 99, *message[:6]]
    conversation = GrowingChains(bits=16)
    conversation.append(np.array(context))
    guess = lookup([conversation, Past(message).chains], context, 16)
    assert guess.tokens[:5] == [46, 47, 48, 49, 99] and guess.support[0] == 1


def test_a_copy_drafts_at_most_max_copy_tokens_a_batch_of_64():
    """As prompt lookup's: the copy's last token checks the round's own, so `--mode suffix -k 64` drafted 64
    (a batch of 65, where the docs say 63) and auto was offered 64."""
    from specchat.drafters.ngram import MAX_COPY

    block = list(range(100, 300))
    context = block + block[:10]
    drafter = SuffixDrafter()
    assert len(drafter.offer(context, 64).rates) == MAX_COPY
    assert len(drafter.propose(context, 64, None).tokens) == MAX_COPY
