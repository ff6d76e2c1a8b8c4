"""Prompt lookup (n-gram) drafting, copy odds and the auto controller's choices, on synthetic inputs."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.costmodel import Costs, expected_tokens
from specchat.drafters import Draft, Outcome
from specchat.drafters import model as model_drafters
from specchat.drafters.auto import AutoDrafter
from specchat.drafters.copyodds import CopyOdds, book
from specchat.drafters.haystack import Haystack, matched_back
from specchat.drafters.model import Acceptance
from specchat.drafters.ngram import (
    FIRST_COPY_CAP,
    MAX_COPY,
    REJOIN_BELOW,
    REJOIN_FOR,
    REJOIN_RUN,
    CopyRuns,
    NgramDrafter,
)
from specchat.drafters.ngramindex import NgramIndex
from specchat.sampling import Sampler, SamplingParams

GREEDY = Sampler(SamplingParams())


def propose(context, k=8, **kwargs):
    return NgramDrafter(**kwargs).propose(context, k, GREEDY).tokens


def test_no_match_proposes_nothing():
    assert propose([1, 2, 3, 4]) == []
    assert propose([]) == []


def test_copies_what_followed_the_earlier_occurrence():
    assert propose([7, 8, 9, 1, 2, 7, 8]) == [9, 1, 2, 7, 8]


def test_prefers_the_longest_match():
    # "3" alone last occurred before 5; "2 3" occurred before 9: the longer match wins.
    assert propose([2, 3, 9, 4, 3, 5, 2, 3], k=1) == [9]


def test_most_recent_occurrence_wins():
    assert propose([1, 2, 10, 1, 2, 20, 1, 2], k=1) == [20]
    # Among occurrences of a max_n-gram that match equally far back, too (ties: the most recent).
    assert propose([1, 2, 10, 1, 2, 20, 1, 2], k=1, max_n=2) == [20]


def test_match_at_the_very_end_of_the_history():
    # The only earlier "5 6" is immediately before the suffix: its continuation is the suffix itself.
    assert propose([5, 6, 5, 6], k=4) == [5, 6]


def test_repeated_pattern_continues_periodically():
    assert propose([1, 2, 3, 1, 2, 3, 1], k=5) == [2, 3, 1]


def test_k_longer_than_the_available_continuation():
    assert propose([4, 5, 6, 4], k=16) == [5, 6, 4]


def test_k_zero_and_min_n():
    assert propose([1, 2, 1], k=0) == []
    assert propose([1, 2, 9, 2], k=2, min_n=2) == []  # only a 1-token match exists


def test_index_follows_growing_and_changed_contexts():
    drafter = NgramDrafter()
    assert drafter.propose([1, 2, 3, 1], 2, GREEDY).tokens == [2, 3]
    assert drafter.propose([1, 2, 3, 1, 2], 2, GREEDY).tokens == [3, 1]
    assert drafter.propose([9, 9, 8, 9], 2, GREEDY).tokens == [8, 9]  # a new conversation: rebuilt


def test_match_length_extends_beyond_max_n():
    drafter = NgramDrafter(max_n=2)
    context = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6]
    length, start = drafter.match(context)
    assert length == 6 and context[start] == 0


# -- the chooser -----------------------------------------------------------------------------------------

MAX_K = 64


def linear_costs(per_token: float, base: float = 1.0) -> Costs:
    """v(n) = base + per_token * (n - 1) target steps; one step is 1 s."""
    return Costs({n: base + per_token * (n - 1) for n in range(1, MAX_K + 2)}, None, 1.0, 1.0)


def analytic_best(rate: float, step: float, costs: Costs, k_max: int) -> int:
    speeds = [(1 + sum(rate**i for i in range(1, k + 1))) / (k * step + costs.v(k + 1)) for k in range(k_max + 1)]
    return max(range(k_max + 1), key=lambda k: (speeds[k], -k))


def one_round(auto: AutoDrafter, context: list[int], produced_after, k: int = 64) -> Draft:
    """Propose, then let the target 'produce' produced_after(draft) and teach every drafter."""
    draft = auto.propose(context, k, GREEDY)
    produced = produced_after(draft)
    accepted = next((i for i, (a, b) in enumerate(zip(draft.tokens, produced, strict=False)) if a != b), len(draft))
    accepted = min(accepted, len(produced) - 1)
    auto.learn(Outcome(len(context), draft, accepted, produced, auto.costs.v(len(draft) + 1) * auto.costs.step_s))
    context.extend(produced)
    return draft


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize(("per_token", "step"), [(0.05, 0.05), (0.1, 0.02), (0.5, 0.0), (1.0, 0.6), (0.9, 0.0)])
def test_best_length_is_the_analytic_optimum(rate, per_token, step):
    costs = linear_costs(per_token)
    k, speed = costs.best_length([rate] * 12, step)
    assert k == analytic_best(rate, step, costs, 12)
    assert speed == pytest.approx(expected_tokens([rate] * k)[k] / (k * step + costs.v(k + 1)))


def test_k_zero_when_drafting_cannot_pay():
    """A compute-bound CPU: verifying n tokens costs n steps and a draft step 0.6: never draft."""
    assert linear_costs(1.0).best_length([1.0] * MAX_K, 0.6)[0] == 0


def test_gpu_like_costs_draft_long():
    k, speed = linear_costs(0.03).best_length([0.9] * MAX_K, 0.03)
    assert k >= 6 and speed > 3.0


@pytest.mark.parametrize(
    ("verify", "step", "expected"),
    [
        ({1: 1.0, 2: 1.8, 16: 8.0, 64: 24.0}, 5e-4, (64, 64 / (63 * 5e-4 + 24.0))),  # a 2-core CPU: under 3x
        ({1: 1.0, 16: 1.05, 64: 1.6}, 0.1, (64, 64 / (63 * 0.1 + 1.6))),  # a GPU: a draft model 8x
        ({1: 1.0, 2: 1.9, 4: 3.8}, 0.9, (1, 1.0)),  # a draft step nearly a target step: never pays
    ],
)
def test_ceiling_is_the_speedup_of_perfect_guesses(verify, step, expected):
    """What drafting could give if every guess held, over the measured sizes (tune and bench show it)."""
    batch, speedup = Costs(verify, None, 0.04, 0.04).ceiling(step)
    assert (batch, speedup) == (expected[0], pytest.approx(expected[1]))


def test_the_draft_models_ceiling_is_over_the_drafts_it_makes():
    """The draft model drafts at most 16 tokens a round; its ceiling over a batch of 64 it never drafts read
    "draft model at most 1.03x (batch of 64)" in tune where batches of 17 or fewer could not pay at all."""
    costs = Costs({1: 1.0, 2: 1.9, 8: 7.0, 16: 9.5, 32: 13.5, 64: 22.0}, 0.6, 0.04, 0.04)
    ceilings = costs.ceilings()
    assert ceilings["lookup"][0] == 64
    assert ceilings["draft model"] == (1, 1.0)  # 15 guesses at 0.6 steps + v(16) = 18.5 steps for 16 tokens
    gpu = Costs({1: 1.0, 16: 1.05, 64: 1.6}, 0.1, 0.01, 0.01).ceilings()["draft model"]
    assert gpu == (16, pytest.approx(16 / (15 * 0.1 + 1.05)))


def test_expected_tokens_matches_the_closed_form():
    a, k = 0.7, 5
    assert expected_tokens([a] * k)[k] == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_costs_interpolate_and_rescale_every_size_together():
    costs = Costs({1: 1.0, 5: 3.0}, None, 0.04, 0.04)
    assert costs.v(3) == pytest.approx(2.0)
    assert costs.v(10) == pytest.approx(6.0)  # per-token cost of the largest measurement
    for _ in range(50):
        costs.observe_verify(1, 0.08)  # the machine got twice as slow: a single step now takes 80 ms
    assert costs.verify == {1: 1.0, 5: 3.0}  # ratios untouched: a fresh v(1) never divides into stale sizes
    assert costs.step_s == pytest.approx(0.08, rel=0.02) and costs.drifted


def test_slow_steps_deep_into_a_long_text_are_not_drift():
    """Beyond DRIFT_CONTEXT a step is slower because attention reads a longer cache; measuring again after
    a short text would find the same costs, so those rounds rescale the costs but never mark them stale."""
    costs = Costs({1: 1.0, 5: 3.0}, None, 0.04, 0.04)
    for _ in range(50):
        costs.observe_verify(1, 0.06, context=3000)  # 1.5x the calibrated step, 3,000 tokens in
    assert costs.step_s == pytest.approx(0.06, rel=0.02) and not costs.drifted
    for _ in range(50):
        costs.observe_verify(1, 0.06, context=300)  # as slow where the text is short: the machine changed
    assert costs.drifted
    odd_start = Costs({1: 1.0, 5: 3.0}, None, 0.04, 0.04)
    odd_start.observe_verify(1, 0.4, context=10)  # one hiccup of 10x in the first round, then as calibrated
    for _ in range(40):
        odd_start.observe_verify(1, 0.04, context=10)
    assert not odd_start.drifted


def test_a_slow_spell_is_not_drift_but_a_slower_machine_is():
    """A shared VM runs a dozen rounds 50% slow now and then; measuring again after such a spell would find
    the same costs, so only most of the latest rounds running at another speed mark the costs stale."""
    costs = Costs({1: 1.0, 5: 3.0}, None, 0.04, 0.04)
    for _ in range(3):
        for _ in range(30):
            costs.observe_verify(1, 0.04, context=300)
        for _ in range(15):
            costs.observe_verify(1, 0.06, context=300)
            assert not costs.drifted
    for _ in range(40):
        costs.observe_verify(1, 0.06, context=300)
    assert costs.drifted


def test_auto_tells_the_costs_how_far_into_the_text_a_round_was():
    auto = AutoDrafter(linear_costs(0.5), [NgramDrafter()])
    context = list(range(3000))
    for _ in range(40):
        one_round(auto, context, lambda draft: [7, 8])
    assert auto.costs.rounds_seen >= 40 and auto.costs.near_rounds == 0


def test_acceptance_learns_and_the_cautious_estimate_is_below_the_optimistic_one():
    arm = Acceptance(prior=0.5)
    cautious, hopeful = arm.rates(1, 1.0)[0], arm.rates(1, -1.0)[0]
    assert cautious < 0.5 < hopeful
    for _ in range(50):
        arm.observe(4, 0)
    assert arm.rates(1, -1.0)[0] < 0.2 < cautious


def test_acceptance_forgets_old_rounds_quickly():
    """Code then prose in one conversation: the prose rounds decide within a few rounds."""
    arm = Acceptance(prior=0.6)
    for _ in range(40):
        arm.observe(4, 4)  # code: everything accepted
    for _ in range(8):
        arm.observe(1, 0)  # prose: nothing is
    assert arm.rates(1, 0.0)[0] < 0.6


def test_auto_uses_copies_when_they_pay_and_stops_when_they_fail():
    """Cheap verify (GPU-like): copies are drafted; after many rejections of short matches, no more."""
    auto = AutoDrafter(linear_costs(0.05), [NgramDrafter()])
    context = list(range(100, 140)) + list(range(100, 120))  # the reply is copying its input
    draft = auto.propose(context, 16, GREEDY)
    assert draft.source == "ngram" and draft.tokens == list(range(120, 120 + len(draft)))
    # A reply whose 3-token matches never continue ("7 8 9" is followed by a new token every time): on a
    # machine where a batch of 2 costs 1.5 steps such a copy is drafted at the priors; once the text has
    # shown it failing, it is not.
    auto = AutoDrafter(linear_costs(0.5), [NgramDrafter()])
    noisy = [7, 8, 9, 1, 7, 8, 9, 2, 7, 8, 9]
    assert auto.propose(noisy, 16, GREEDY).tokens[:1] == [2]
    for step in range(60):
        one_round(auto, noisy, lambda _d, s=step: [900 + s, 7, 8, 9][:1])
        noisy += [7, 8, 9]
    assert auto.propose(noisy, 16, GREEDY).tokens == []
    assert auto.drafters[0].odds.rate(3) < 0.2  # from the 0.7 prior (pooled with the 2-token bucket)


def test_a_reply_repeating_itself_does_not_make_its_copies_of_the_input_timid():
    """Copies of the prompt and copies of the reply's own earlier tokens have separate odds: a reply
    whose self-repetitions keep breaking still copies its input at the input's odds."""
    ngram = NgramDrafter()
    auto = AutoDrafter(linear_costs(0.5), [ngram])
    prompt = list(range(200, 240))
    auto.prefill(prompt[:-1])
    context = [*prompt, 7, 8, 9, 1]
    fresh = ngram.odds.rate(3)
    assert ngram.reply_odds.rate(3) < fresh  # a reply repeats itself less reliably than it copies input
    for step in range(40):  # "7 8 9" recurs in the reply and is followed by something new every time
        context += [7, 8, 9]
        one_round(auto, context, lambda _d, s=step: [900 + s])
    assert ngram.reply_odds.rate(3) < 0.2 and ngram.odds.rate(3) == fresh
    context += prompt[:12]  # the reply now quotes its input
    draft = auto.propose(context, 16, GREEDY)
    assert draft.source == "ngram" and draft.tokens == list(range(212, 212 + len(draft)))


def follow(ngram: NgramDrafter, prompt: list[int], reply: list[int]) -> list[int]:
    """The reply produced one token per round (the target alone), every copy on offer booked."""
    ngram.prefill(prompt[:-1])
    context = list(prompt)
    for token in reply:
        ngram.offer(context, 16)
        ngram.learn(Outcome(len(context), Draft(), 0, [token], 0.0))
        context.append(token)
    return context


def test_after_an_edit_the_copy_rejoins_the_input_just_after_the_change():
    """An edit replaces a token of the file it is copying; the reply then goes on with what followed
    the replaced token. Its next token (7) also occurs later in the file, where plain lookup (the
    latest occurrence) would copy from; the copy rejoins the file right after the change instead."""
    prompt = [*range(100, 121), 7, *range(121, 130), 7, 500, 501, 502]
    reply = [*range(100, 120), 900, 7]  # copies 20 tokens, writes 900 instead of 120, then the 7 after it
    ngram = NgramDrafter()
    context = follow(ngram, prompt, reply)
    assert ngram.propose(context, 4, GREEDY).tokens == [121, 122, 123, 124]
    assert ngram.rejoin_odds.rate(1) > ngram.odds.rate(1)  # one rejoined token is a far better guess
    fresh = NgramDrafter()  # no copy broke: the latest occurrence of 7
    fresh.prefill(prompt[:-1])
    assert fresh.propose(context, 3, GREEDY).tokens == [500, 501, 502]


@pytest.mark.parametrize(("written", "rejoins"), [(22, True), (23, False)])
def test_a_copy_is_rejoined_for_at_most_rejoin_for_tokens_after_it_broke(written, rejoins):
    """REJOIN_FOR (24) tokens after the break (the 900 and `written` more, then the 7), the copy is
    still rejoined; one token later, lookup copies from the latest 7 as elsewhere."""
    assert REJOIN_FOR == 24
    prompt = [*range(100, 121), 7, *range(121, 130), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 120), 900, *range(901, 901 + written), 7])
    expected = [121, 122, 123] if rejoins else [500, 501, 502]
    assert ngram.propose(context, 3, GREEDY).tokens == expected


@pytest.mark.parametrize(("copied", "rejoins"), [(9, False), (8, True)])
def test_a_long_match_elsewhere_wins_over_rejoining(copied, rejoins):
    """After the break the reply copies another passage: where its match (with the 7) is 9 tokens long
    (REJOIN_BELOW), that copy goes on, not the edited one; one token shorter, the edit is rejoined."""
    assert REJOIN_BELOW == 9
    other = list(range(300, 300 + copied - 1))
    prompt = [*range(100, 121), 7, *range(121, 130), *other, 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 120), 900, *other, 7])
    assert ngram._break is not None  # the edited copy did break
    assert ngram.propose(context, 3, GREEDY).tokens == ([121, 122, 123] if rejoins else [500, 501, 502])


@pytest.mark.parametrize(("copied", "rejoins"), [(REJOIN_RUN, True), (REJOIN_RUN - 1, False)])
def test_a_copy_that_held_rejoin_run_tokens_leaves_a_break_to_rejoin(copied, rejoins):
    assert REJOIN_RUN == 12
    prompt = [*range(100, 100 + copied + 1), 7, *range(200, 209), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 100 + copied), 900, 7])
    assert ngram.propose(context, 3, GREEDY).tokens == ([200, 201, 202] if rejoins else [500, 501, 502])


def test_an_edit_that_replaced_several_tokens_is_rejoined_as_far_after_the_break_as_it_wrote():
    """The reply wrote 3 tokens (900-902) where the input had 10 (120-129): the 7 it then wrote is 9
    tokens after the break, past REJOIN_WINDOW (8) but within it and the 3 the reply wrote since."""
    prompt = [*range(100, 130), 7, *range(130, 135), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 120), 900, 901, 902, 7])
    assert ngram.propose(context, 3, GREEDY).tokens == [130, 131, 132]


def test_after_a_pure_insertion_the_copy_rejoins_at_the_token_it_broke_at():
    """The reply inserted 900 before 120 and then wrote the 120: the copy goes on with what followed
    it in the input (121), not after the 120 that occurs later."""
    prompt = [*range(100, 125), 120, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 120), 900, 120])
    assert ngram.propose(context, 3, GREEDY).tokens == [121, 122, 123]


def test_a_copy_whose_last_drafted_token_held_but_whose_own_token_broke_leaves_a_break():
    """A copy of MAX_COPY tokens held in full; the round's own token (the target's, after them) is the
    first that differs from the input: that is where the edit broke the copy, and it is rejoined."""
    assert MAX_COPY == 63
    prompt = [*range(100, 177), 7, *range(300, 310), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, list(range(100, 113)))
    drafted = list(range(113, 176))  # 63 tokens: the round's own token would be 176
    assert ngram.propose(context, MAX_COPY, GREEDY).tokens == drafted
    produced = [*drafted, 900]
    ngram.learn(Outcome(len(context), Draft(drafted, [None] * MAX_COPY, source="ngram"), MAX_COPY, produced, 0.0))
    context += produced
    ngram.offer(context, 16)
    ngram.learn(Outcome(len(context), Draft(), 0, [7], 0.0))
    assert ngram.propose([*context, 7], 3, GREEDY).tokens == [300, 301, 302]


def test_a_copy_held_in_short_rounds_to_the_end_of_its_passage_leaves_no_break():
    """The reply quoted a passage to the control token after it, a token per round (each round shorter
    than the copy on offer, all of it held): nothing broke, so its last token written again is looked
    up as anywhere else (in the reply), not rejoined where the quote ended."""
    prompt = [*range(100, 120), 0, 50, 51]
    ngram = NgramDrafter(ends_copy=lambda token: token == 0)
    context = follow(ngram, prompt, [*range(100, 120), 900, 119])
    assert ngram.propose(context, 3, GREEDY).tokens == [900, 119]


def test_a_reply_repeating_itself_that_breaks_leaves_the_break_in_the_input_to_rejoin():
    """The reply edited the input (900 for 120), then repeated 12 of its own tokens and wrote the 7
    that followed the edited token in the input: its own copy broke there, but only a break in the
    input can be rejoined, and the input's is still the one to rejoin."""
    prompt = [*range(100, 121), 7, *range(121, 130), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [*range(100, 120), 900, *range(108, 120), 7])
    assert ngram.propose(context, 3, GREEDY).tokens == [121, 122, 123]


def test_copy_runs_count_whole_copies_in_a_row_and_any_other_round_ends_a_run():
    runs = CopyRuns()

    def round_(drafted: int, accepted: int, source: str = "ngram") -> None:
        draft = Draft(list(range(drafted)), [None] * drafted, source=source)
        runs.learn("ngram", Outcome(0, draft, accepted, [0] * (accepted + 1), 0.0))

    round_(5, 5)
    round_(4, 4)
    assert (runs.run, runs.longest) == (9, 9)
    round_(6, 3)  # a copy that broke: its 3 count, then the run ends
    assert (runs.run, runs.longest) == (0, 12)
    round_(4, 4)
    round_(3, 3, source="suffix")  # another drafter's round ends it too
    round_(2, 2)
    assert (runs.run, runs.longest) == (2, 12) and runs.cap == 24


def test_a_reply_repeating_its_own_lines_is_judged_by_the_reply_odds_where_lines_are_known():
    """Past a line break or not, a copy of the reply's own earlier tokens is no better a guess."""
    ngram = NgramDrafter(line_role=line_role)
    lines = [1, 2, 3, BREAK, 4, 5, 6, BREAK]
    context = follow(ngram, [50, 51, 52], [*lines, 1, 2, 3, BREAK, 4])
    rates = ngram.offer(context, 4).rates
    copy = ngram._copy
    assert copy.kind == "reply" and copy.aligned[0]
    assert rates[0] == ngram.reply_odds.rate(copy.matched)


def test_a_short_quote_that_breaks_leaves_nothing_to_rejoin():
    """A summary quoting five words of its input is not an edit of it: after the quote ends, lookup
    copies from wherever the last token occurred, as before."""
    prompt = [*range(100, 121), 7, *range(121, 130), 7, 500, 501, 502]
    ngram = NgramDrafter()
    context = follow(ngram, prompt, [300, 301, *range(110, 115), 900, 7])
    assert ngram.propose(context, 3, GREEDY).tokens == [500, 501, 502]


def test_each_reply_starts_from_the_priors():
    """Copy evidence of one reply does not carry into the next (prefill starts a reply)."""
    ngram = NgramDrafter()
    for _ in range(50):
        ngram.odds.observe(3, False)
    low = ngram.odds.rate(3)
    AutoDrafter(linear_costs(0.05), [ngram]).prefill([1, 2, 3])
    assert ngram.odds.rate(3) > low and ngram.odds.tried == {}


def test_offered_copies_are_learned_without_drafting_them():
    """A copy auto did not draft is still checked against what the target produced, token by token,
    each with the match length it had reached by then."""
    ngram = NgramDrafter()
    auto = AutoDrafter(linear_costs(1.0), [ngram])  # compute-bound: never drafts
    ngram.runs.longest = 32  # a reply that has copied long runs: copies of up to 63 tokens are on offer
    context = list(range(100, 140)) + list(range(100, 110))  # a copy after a 10-token match
    draft = one_round(auto, context, lambda _d: [*range(110, 140), 999])  # 30 more copied, then it left
    assert draft.tokens == []
    # lengths 10..39 held, 40 broke: buckets 9 (10-16), 17 (17-32), 33 (33-40)
    assert ngram.odds.tried == {9: 7, 17: 16, 33: 8}
    assert ngram.odds.held == {9: 7, 17: 16, 33: 7}


def test_copy_odds_learn_from_failures_and_successes():
    odds = CopyOdds()
    before = odds.rate(2)
    for _ in range(40):
        odds.observe(2, False)
    assert odds.rate(2) < 0.1 < before
    for _ in range(200):
        odds.observe(40, True)
    assert odds.rate(40) > 0.98


def test_copy_odds_never_fall_with_the_match_length():
    """One early break of a 40-token match does not outweigh thirty 20-token matches that held."""
    odds = CopyOdds()
    for _ in range(30):
        odds.observe(20, True)
    odds.observe(40, False)
    assert odds.rate(40) >= odds.rate(20) > 0.9
    rates = [odds.rate(n) for n in range(1, 80)]
    assert rates == sorted(rates)


def test_copy_stops_before_control_tokens():
    """A reply quoting the end of the user's message is not offered the chat template that follows it."""
    ngram = NgramDrafter(ends_copy=lambda token: token >= 900)
    auto = AutoDrafter(linear_costs(0.01), [ngram])
    question = list(range(100, 130))
    context = [*question, 900, 901, 7, *question]  # "...question<|im_end|>\n<|im_start|>assistant\n" + quote
    ngram.runs.longest = 32  # a reply that has been copying: long copies allowed
    draft = auto.propose([*context[:-20]], 64, GREEDY)
    assert draft.tokens and 900 not in draft.tokens


def test_only_measured_batch_sizes_are_chosen():
    """Costs are not smooth in n (a batch of 16 can cost less than one of 15): no interpolated sizes."""
    costs = Costs({1: 1.0, 2: 1.9, 8: 7.0, 16: 8.5})
    k, _ = costs.best_length([0.99] * 20, 0.0)
    assert k + 1 in costs.verify and k == 15
    # Guesses that hold for 10 tokens, then rarely: an interpolated batch of 11 would promise the most
    # (1.38x against 1.28x for the measured 16), and is still not chosen.
    rates = [0.99] * 10 + [0.3] * 10
    speeds = costs.speedup(rates, 0.0)
    assert max(range(len(speeds)), key=speeds.__getitem__) + 1 not in costs.verify
    assert costs.best_length(rates, 0.0) == (15, pytest.approx(speeds[15]))


def test_the_speedup_of_drafting_nothing_is_one_whatever_drafting_would_cost():
    """S(0) = 1: k = 0 pays neither the draft steps nor a lagging draft model's catch-up (`fixed`)."""
    speeds = linear_costs(0.5).speedup([0.8, 0.8], 0.2, fixed=3.0)
    assert speeds[0] == 1.0
    assert speeds[1] == pytest.approx(1.8 / (3.0 + 0.2 + 1.5))


def test_the_step_time_starts_from_the_first_sample_when_there_is_none():
    """Costs built from ratios alone (no step time yet): the first round's timing is the step, not a
    tenth of it (the EMA starts from the sample itself)."""
    costs = Costs({1: 1.0, 4: 2.0})
    costs.observe_verify(4, 0.3)
    assert costs.step_s == pytest.approx(0.15)


def test_steady_is_judged_only_after_a_few_rounds():
    """One slow first round (a cold cache) does not say the machine changed; four do."""
    costs = Costs({1: 1.0, 4: 2.0}, None, 0.04, 0.04)
    costs.observe_verify(1, 4.0)
    assert costs.drift > 1.25 and costs.steady
    for _ in range(3):
        costs.observe_verify(1, 4.0)
    assert not costs.steady


def test_match_prefers_the_occurrence_that_matches_furthest_back():
    # "1 2 3 4" occurs twice; only the first is preceded by "8 9" as the suffix is.
    context = [8, 9, 1, 2, 3, 4, 50, 0, 1, 2, 3, 4, 60, 0, 8, 9, 1, 2, 3, 4]
    length, start = NgramDrafter().match(context)
    assert context[start] == 50 and length == 6


def test_acceptance_counts_are_conditional():
    arm = Acceptance()
    arm.observe(4, 1)  # position 1 accepted, position 2 rejected: positions 3-4 were never reached
    assert arm.tried == [1, 1] and arm.held == [1, 0]


def test_auto_never_drafts_on_a_compute_bound_machine_without_matches():
    auto = AutoDrafter(linear_costs(1.0), [NgramDrafter()])
    assert auto.propose([1, 2, 3, 4, 5], 16, GREEDY).tokens == []
    assert auto.last.source == "target"


def test_fixed_prompt_lookup_drafts_k_tokens_whatever_the_copy_cap():
    """--mode ngram -k 12 drafts 12 tokens of a copy; the copy cap is auto's caution, not the mode's."""
    context = list(range(100, 140)) + list(range(100, 110))
    assert NgramDrafter().propose(context, 12, GREEDY).tokens == list(range(110, 122))


class FixedOffer:
    """A drafter that always offers the same per-position odds (and proposes tokens 1..k)."""

    def __init__(self, name: str, uses_model: bool, rates: list[float], upper: list[float]) -> None:
        self.name, self.uses_model, self.rates, self.upper = name, uses_model, rates, upper

    def reset(self) -> None: ...

    def prefill(self, context) -> None: ...

    def warm(self, context) -> None: ...

    def offer(self, context, k_max):
        from specchat.drafters.base import Offer

        return Offer(self.rates[:k_max], self.upper[:k_max])

    def propose(self, context, k, sampler):
        return Draft(tokens=list(range(1, k + 1)), q=[None] * k, source=self.name)

    def learn(self, outcome) -> None: ...


def gpu_like_costs() -> Costs:
    return Costs({n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16)}, 0.1, 1.0, 1.0)


@pytest.mark.parametrize("order", ["model first", "lookup first"])
def test_a_trial_must_beat_the_best_choice_of_every_drafter_not_the_best_so_far(order):
    """Found by the simulator: with the draft model listed first, its trial was judged against the
    target alone, before prompt lookup's far better copy was seen, and long copies were cut short."""
    model = FixedOffer("spec", True, [0.3] * 8, [0.6] * 8)  # pays optimistically only
    lookup = FixedOffer("ngram", False, [0.97] * 15, [0.97] * 15)  # a copy that pays by far
    drafters = [model, lookup] if order == "model first" else [lookup, model]
    choice = AutoDrafter(gpu_like_costs(), drafters).choose(list(range(50)), 64)
    assert (choice.source, choice.explore) == ("ngram", False)
    assert choice.k == 15


def test_the_chosen_drafter_is_not_also_tried_shorter():
    """A draft model that pays on its cautious estimate learns from its own rounds: exploring it again
    (at most EXPLORE_MAX_K long, from the optimistic odds) would only cut its drafts short."""
    model = FixedOffer("spec", True, [0.8] * 8, [0.95] * 8)
    choice = AutoDrafter(gpu_like_costs(), [model]).choose(list(range(50)), 8)
    assert (choice.source, choice.explore) == ("spec", False)
    assert choice.k > 4


BREAK, INDENT = 10, 11  # a token holding a line break, and one of spaces only


def line_role(token: int) -> str:
    return "break" if token == BREAK else "space" if token == INDENT else "text"


def test_a_copy_whose_match_goes_past_a_line_break_gets_the_odds_of_whole_lines():
    """The reply copies the input line by line: once its match covers a line break and text after it
    (the next line's start holds), the copy is judged by the odds of whole-line copies, which are
    higher than those of a match within a line at the same length. Right after a break, or past it
    only by an indent, the match says nothing of the next line yet."""
    lines = [1, 2, 3, BREAK, INDENT, 4, 5, 6, BREAK, INDENT, 7, 8, 9, BREAK]
    prompt = [50, 51, *lines, 60, 61]
    ngram = NgramDrafter(line_role=line_role)

    def offer(reply):
        ngram.prefill(prompt)
        rates = ngram.offer([*prompt, *reply], 8).rates
        return ngram._copy, rates

    copy, rates = offer([1, 2, 3, BREAK, INDENT, 4])  # past the break with text: 6 tokens matched
    assert copy.aligned[0] and rates[0] == ngram.line_odds["input", True].rate(6)
    assert rates[0] > ngram.line_odds["input", False].rate(6)
    copy, rates = offer([2, 3, BREAK, INDENT])  # past it only by the indent
    assert not copy.aligned[0] and rates[0] == ngram.line_odds["input", False].rate(4)
    assert copy.aligned[1]  # ... until the copy's own first token, 4, would hold
    copy, _ = offer([4, 5, 6, BREAK])  # right at the next break: the next line is open again
    assert copy.aligned[:5] == (False, False, True, True, True)  # INDENT, 7: then past that break too


def test_whole_line_copies_learn_apart_from_copies_within_a_line():
    prompt = [50, 1, 2, 3, BREAK, 4, 5, 6, 7, 8, 9, 60]
    ngram = NgramDrafter(line_role=line_role)
    follow(ngram, prompt, [1, 2, 3, BREAK, 4, 99])  # the copy broke past the break: at 99 for 5
    lines, in_line = ngram.line_odds["input", True], ngram.line_odds["input", False]
    assert (lines.tried, lines.held) == ({5: 1}, {5: 0})  # [1 2 3 BREAK 4] went on past the break: 5 missed
    assert (in_line.tried, in_line.held) == ({1: 1, 2: 1, 3: 2}, {1: 1, 2: 1, 3: 2})
    assert ngram.odds.tried == {}  # the pooled odds, for models whose line breaks are unknown: untouched


def test_a_round_books_each_token_of_a_copy_in_the_odds_that_judged_it():
    """One drafted copy that crosses a break and the next line's first token: the tokens before are
    booked within a line, those after as whole lines, each at the match length it had then."""
    prompt = [50, 1, 2, 3, BREAK, 4, 5, 6, 7, 60]
    ngram = NgramDrafter(line_role=line_role)
    ngram.prefill(prompt)
    context = [*prompt, 1, 2]
    draft = ngram.propose(context, 5, GREEDY)
    assert draft.tokens == [3, BREAK, 4, 5, 6] and ngram._copy.aligned[:5] == (False, False, False, True, True)
    ngram.learn(Outcome(len(context), draft, 4, [3, BREAK, 4, 5, 99], 0.0))  # held 4, then 99 for 6
    lines, in_line = ngram.line_odds["input", True], ngram.line_odds["input", False]
    assert (in_line.tried, in_line.held) == ({2: 1, 3: 2}, {2: 1, 3: 2})  # 3, BREAK, 4 at lengths 2, 3, 4
    assert (lines.tried, lines.held) == ({5: 2}, {5: 1})  # 5 held at length 5, 6 broke at length 6


def test_without_line_roles_copies_are_judged_as_before():
    ngram = NgramDrafter()
    ngram.prefill([1, 2, 3, BREAK, 4, 5, 6])
    rates = ngram.offer([1, 2, 3, BREAK, 4, 5, 6, 1, 2, 3, BREAK, 4], 4).rates
    assert ngram._copy.aligned is None and rates[0] == ngram.odds.rate(5)


# -- the draft model's own confidence: where auto stops drafting -----------------------------------------

FLAT = Costs({n: 1.0 + 0.01 * n for n in (1, 2, 3, 4, 5, 6, 8, 12, 16)}, 0.1, 1.0, 1.0)  # a GPU: slots free
LINEAR = Costs({n: float(n) for n in (1, 2, 3, 4, 5, 6, 8, 12, 16)}, 0.3, 1.0, 1.0)  # a CPU: a slot a step


def test_draft_on_goes_on_while_the_guesses_are_likely_and_more_would_pay():
    assert FLAT.draft_on([0.99, 0.98], 8, 0.1, 0.0, [0.9] * 8) is None


def test_draft_on_drops_an_unlikely_guess_where_verify_slots_cost():
    # A CPU where each verified token costs a step: a guess at 10% is not worth its slot, nor drafting on.
    assert LINEAR.draft_on([0.99, 0.1], 8, 0.3, 0.0, [0.9] * 8) == 1
    assert LINEAR.draft_on([0.1], 8, 0.3, 0.0, [0.9] * 8) == 0


def test_draft_on_keeps_an_unlikely_guess_where_a_slot_is_free_but_stops_drafting_on():
    # On a GPU verifying one more costs 1% of a step: the 10% guess is kept; a step of 0.1 for the
    # next (at most 10% x 0.3) is not drafted.
    assert FLAT.draft_on([0.99, 0.1], 8, 0.1, 0.0, [0.3] * 8) == 2


def test_draft_on_stops_at_k_and_only_keeps_measured_sizes():
    assert FLAT.draft_on([0.99] * 7, 7, 0.1, 0.0, [0.9] * 7) == 7
    assert FLAT.draft_on([0.99] * 8, 8, 0.1, 0.0, [0.9] * 8) == 7  # a batch of 9 was never timed
    gappy = Costs({1: 1.0, 2: 1.3, 4: 2.0, 8: 3.0}, 0.2, 1.0, 1.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        chances = np.cumprod(rng.uniform(0.05, 1.0, rng.integers(1, 8))).tolist()
        keep = gappy.draft_on(chances, 7, 0.2, 0.0, [0.8] * 7)
        assert keep is None or keep == 0 or gappy.measured(keep + 1)


def test_the_confidence_calibration_starts_from_its_priors_and_learns():
    calibration = model_drafters.Calibration()
    assert calibration.chance(0.995) == pytest.approx(model_drafters.CONFIDENCE_PRIORS[0.99])
    assert calibration.chance(0.4) == pytest.approx(model_drafters.CONFIDENCE_PRIORS[0.3])
    before = calibration.chance(0.4)
    for _ in range(20):
        calibration.observe([0.4, 0.4, 0.4], 3)  # every 0.4 guess held
    assert calibration.chance(0.4) > before + 0.3
    calibration.observe([0.95, 0.4, 0.4], 0)  # only the first was judged: it failed
    assert calibration.tried[0.9] == 1 and calibration.held.get(0.9, 0) == 0


def test_imputed_positions_count_as_reached_as_often_as_their_chances_say():
    acceptance = Acceptance()
    acceptance.observe(2, 2)
    acceptance.impute(2, [0.5, 0.5])
    assert acceptance.tried[2] == pytest.approx(1.0) and acceptance.held[2] == pytest.approx(0.5)
    assert acceptance.tried[3] == pytest.approx(0.5) and acceptance.held[3] == pytest.approx(0.25)


def peaked(confidences: dict[int, float], n_vocab: int = 16):
    """Draft logits whose arg-max is token (length % 8) + 2, held with the probability given for that
    context length (else 0.999)."""

    def row(context: tuple[int, ...]) -> np.ndarray:
        p = confidences.get(len(context), 0.999)
        out = np.full(n_vocab, np.log((1 - p) / (n_vocab - 1)))
        out[len(context) % 8 + 2] = np.log(p)
        return out

    return row


def test_a_stop_is_told_the_calibrated_chances_and_keeps_what_it_says():
    from fakes import FakeModel

    drafter = model_drafters.DraftModelDrafter(FakeModel(peaked({6: 0.4}), n_vocab=16))
    seen: list[list[float]] = []

    def stop(chances):
        seen.append(list(chances))
        return 2 if len(chances) == 3 else None

    context = [1, 1, 1, 1]
    draft = drafter.propose(context, 6, Sampler(SamplingParams()), stop=stop)
    chance = drafter.calibration.chance
    assert seen[-1] == pytest.approx([chance(0.999), chance(0.999) ** 2, chance(0.999) ** 2 * chance(0.4)])
    assert draft.tokens == [6, 7] and drafter.steps == 3  # the third guess was made, then dropped
    # Both kept guesses held: the calibration learns them, the dropped third is imputed, not ignored.
    drafter.learn(Outcome(len(context), draft, 2, [6, 7, 8], 0.0))
    assert drafter.calibration.tried == {0.99: 2}
    assert drafter.acceptance.tried[2] == pytest.approx(1.0)
    assert drafter.acceptance.held[2] == pytest.approx(chance(0.4))
    # A kept guess that was rejected: the dropped one was never reached, so nothing is imputed.
    drafter = model_drafters.DraftModelDrafter(FakeModel(peaked({6: 0.4}), n_vocab=16))
    draft = drafter.propose(context, 6, Sampler(SamplingParams()), stop=stop)
    drafter.learn(Outcome(len(context), draft, 1, [6, 9], 0.0))
    assert drafter.acceptance.tried == [1.0, 1.0] and drafter.acceptance.held == [1.0, 0.0]


def test_the_draft_models_offer_counts_the_tokens_it_must_catch_up_on():
    """Until the first token is out (warm) the prompt waits: the offer is cold and must catch up on all
    of it. Warm, the prompt's last token is evaluated by the next round: a draft model in step lags by
    none; one that other drafters' rounds left behind lags by the tokens it has not seen."""
    from fakes import FakeModel

    model = FakeModel(peaked({}), n_vocab=16)
    drafter = model_drafters.DraftModelDrafter(model)
    drafter.prefill([1, 1, 1])
    cold = drafter.offer([1, 1, 1, 1], 4)
    assert cold.cold and cold.catch_up == 3 and model.calls == []
    assert drafter.propose([1, 1, 1, 1], 4, Sampler(SamplingParams())) == Draft()  # spec: the target's round
    drafter.warm([1, 1, 1, 1, 5])
    assert not drafter.offer([1, 1, 1, 1, 5], 4).cold
    assert drafter.offer([1, 1, 1, 1, 5], 4).catch_up == 0
    assert drafter.offer([1, 1, 1, 1, 5, 6, 7, 8], 4).catch_up == 3


def test_without_a_stop_the_draft_model_drafts_k_as_before():
    from fakes import FakeModel

    drafter = model_drafters.DraftModelDrafter(FakeModel(peaked({5: 0.05, 6: 0.05}), n_vocab=16))
    draft = drafter.propose([1, 1, 1, 1], 4, Sampler(SamplingParams()))
    assert len(draft) == 4 and drafter.steps == 4


def test_a_stop_that_keeps_nothing_is_imputed_not_counted_as_a_miss():
    from fakes import FakeModel

    drafter = model_drafters.DraftModelDrafter(FakeModel(peaked({4: 0.2}), n_vocab=16))
    draft = drafter.propose([1, 1, 1, 1], 4, Sampler(SamplingParams()), stop=lambda chances: 0)
    assert len(draft) == 0 and drafter.steps == 1
    drafter.learn(Outcome(4, draft, 0, [6], 0.0))
    chance = drafter.calibration.chance(0.2)
    assert drafter.acceptance.tried == [pytest.approx(1.0)] and drafter.acceptance.held == [pytest.approx(chance)]
    # --p-min stopping before the first guess is still a miss.
    strict = model_drafters.DraftModelDrafter(FakeModel(peaked({4: 0.2}), n_vocab=16), p_min=0.5)
    empty = strict.propose([1, 1, 1, 1], 4, Sampler(SamplingParams()))
    strict.learn(Outcome(4, empty, 0, [6], 0.0))
    assert strict.acceptance.tried == [1.0] and strict.acceptance.held == [0.0]


def test_prompt_lookup_copies_from_the_text_a_client_expects_until_it_is_forgotten():
    """An API client's `prediction` (the file an edit returns) is copied from where it matches the reply,
    as the input is; an empty one forgets it."""
    prompt = [*range(100, 110)]
    expected = [*range(300, 340)]
    ngram = NgramDrafter()
    ngram.expect(expected)
    context = follow(ngram, prompt, expected[:6])
    assert ngram.propose(context, 4, GREEDY).tokens == [306, 307, 308, 309]
    ngram.expect(())
    ngram.prefill(context[:-1])
    assert ngram.propose(context, 4, GREEDY).tokens == []


@pytest.mark.parametrize("seconds", [0.0, -0.01, float("nan"), float("inf")])
def test_a_timing_the_clock_got_wrong_leaves_the_costs_alone(seconds):
    """A round timed as 0, negative, NaN or infinite seconds (no monotonic clock gives one; an injected one
    can) is no sample: a NaN made the step time NaN for good (every later round's timing was then lost, and
    drift went unseen), and a negative draft step drove c toward 0, as if the draft model were free."""
    costs = Costs({1: 1.0, 4: 2.0}, 0.5, 0.04, 0.04)
    costs.observe_verify(4, seconds)
    costs.observe_draft(2, seconds)
    assert (costs.step_s, costs.draft_step, costs.rounds_seen, costs.near_rounds) == (0.04, 0.5, 0, 0)
    costs.observe_verify(4, 0.16)  # then a real timing counts as ever
    assert costs.step_s == pytest.approx(0.9 * 0.04 + 0.1 * 0.08)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_broken_row_of_the_draft_model_ends_the_draft_not_the_reply(temperature):
    """A NaN row from the draft model raised 'no finite probabilities' and failed the whole reply (a 500 in
    serve), though the target, which checks every guess, answers as always: the draft ends there."""
    from fakes import FakeModel

    def broken(context):
        row = np.zeros(16)
        row[3] = np.nan if len(context) > 4 else 1.0
        return row

    drafter = model_drafters.DraftModelDrafter(FakeModel(broken, n_vocab=16))
    draft = drafter.propose([1, 1, 1, 1], 6, Sampler(SamplingParams(temperature=temperature, seed=1)))
    assert len(draft.tokens) == 1  # the first guess, from a good row; the next row is NaN


# -- mutants that survived the fast suite (hand-made mutation testing, session 32) -----------------


def test_the_index_starts_over_for_a_longer_text_that_does_not_extend_it():
    index = NgramIndex(2)
    index.sync([1, 2, 3])
    index.sync([4, 5, 6, 7])  # longer, but another conversation
    assert index.tokens == [4, 5, 6, 7] and index.lookup(1) is None


def test_the_first_max_n_gram_of_the_text_is_a_candidate_too():
    # [1, 2, 3, 4] occurs only at the very start: its follower (index 4 = max_n) is found at full length.
    assert NgramDrafter(max_n=4).match([1, 2, 3, 4, 9, 8, 1, 2, 3, 4]) == (4, 4)


def test_copy_cap_never_exceeds_the_longest_copy():
    assert CopyRuns(longest=40).cap == MAX_COPY and CopyRuns(longest=5).cap == 10


def test_a_copy_that_missed_only_its_last_token_ends_the_run():
    runs = CopyRuns(run=5, longest=5)
    runs.learn("ngram", Outcome(0, Draft([1, 2, 3], [None] * 3, source="ngram"), 2, [1, 2, 9], 0.0))
    assert (runs.run, runs.longest) == (0, 7)


def test_the_expected_text_wins_a_tie_with_the_text_itself():
    """Where the client's prediction matches as far back as the input does, its continuation is copied."""
    ngram = NgramDrafter()
    ngram.expect([1, 2, 3, 4, 50])
    assert ngram.propose([10, 1, 2, 3, 4, 20, 30, 1, 2, 3, 4], 1, GREEDY).tokens == [50]


def test_offered_rates_grow_along_the_copy_with_the_match_length_by_then():
    rates = NgramDrafter().offer([7, 8, 9, 1, 2, 7], 3).rates  # matched 1, then 2, then 3 tokens
    assert rates[0] < rates[1] < rates[2]


def test_a_fresh_drafter_vouches_for_a_first_copy_cap_only():
    assert NgramDrafter().offer([7, 8, 9, 1, 2, 7], 3).proven == FIRST_COPY_CAP


def test_an_outcome_at_another_place_books_nothing():
    ngram = NgramDrafter()
    context = [7, 8, 9, 1, 2, 7]
    draft = ngram.propose(context, 3, GREEDY)
    ngram.learn(Outcome(len(context) + 1, draft, 3, [8, 9, 1, 2], 0.0))
    assert ngram.odds.tried == {}


def test_the_reply_begins_after_the_last_prompt_token():
    """prefill gets the prompt but its last token: a copy from that token copies the input, one from the
    token after it copies the reply."""
    ngram = NgramDrafter()
    ngram.prefill([1, 2, 3, 4])  # the prompt is [1, 2, 3, 4, 5]
    assert not ngram._copy_at([1, 2, 3, 4, 5, 9, 4]).from_reply  # copies from 5, the prompt's last token
    assert ngram._copy_at([1, 2, 3, 4, 5, 9, 8, 5]).from_reply  # copies from 9, the reply's first


def test_matched_back_stops_at_the_start_of_a_shorter_text():
    assert matched_back([1, 2, 3, 4], 4, 1, 10, text=[3, 4]) == 2


@pytest.mark.parametrize(
    ("haystack", "context", "candidates", "expected"),
    [
        ([1, 2, 9], [1, 2], 16, (2, 2)),  # a text of exactly n tokens is looked up
        ([1, 2, 3, 4, 5], [7, 3, 4], 16, (2, 4)),  # the haystack's last n-gram has its follower indexed
        ([1, 2, 10, 1, 2, 20, 1, 2, 30], [5, 1, 2], 1, (2, 8)),  # the latest `candidates` places are compared
    ],
)
def test_haystack_match(haystack, context, candidates, expected):
    assert Haystack(haystack, 2).match(context, 10, candidates) == expected


def test_copy_odds_treat_a_zero_length_match_as_one_token():
    assert CopyOdds().rate(0) == CopyOdds().rate(1)


def test_book_judges_the_guess_only_not_the_tokens_produced_past_it():
    odds = CopyOdds()
    assert book(lambda _i: odds, [1, 2], 3, [1, 2, 7]) == 2
    assert (odds.tried, odds.held) == ({3: 2}, {3: 2})  # matched 3, then 4: both in bucket 3, both held
