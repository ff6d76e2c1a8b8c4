"""The speculative loop against deterministic fake models: losslessness, counting, stops and KV hygiene."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from fakes import (
    EOG,
    DraftLM,
    FakeModel,
    HashLM,
    RecordingDrafter,
    agree_always,
    agree_first,
    agree_hashed,
    agree_never,
    chisquare_pvalue,
    reference_greedy,
)

from specchat.drafters import DraftModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.errors import ContextFullError
from specchat.models_api import CachedModel, common_prefix
from specchat.sampling import Sampler, SamplingParams, probabilities
from specchat.speculative import Round, Stats, speculative_decode

V = 32
TARGET = HashLM(n_vocab=V)
PROMPTS = [[5, 9, 2, 17], [3], [30, 30, 30, 4, 8, 12, 2], [7, 7, 7]]
KS = list(range(1, 9))
GREEDY = SamplingParams(temperature=0.0)

DRAFTS = {
    "copy": lambda target: DraftLM(target, agree_always),
    "mostly-right": lambda target: DraftLM(target, agree_hashed(0.75)),
    "mostly-wrong": lambda target: DraftLM(target, agree_hashed(0.25)),
    "always-wrong": lambda target: DraftLM(target, agree_never),
}


@dataclass
class Run:
    out: list[int]
    stats: Stats
    rounds: list[Round]
    target: FakeModel
    cached: CachedModel
    drafter: RecordingDrafter | None
    # per round, the committed text (prompt + output) before the round, and the target state after it
    before: list[list[int]] = field(default_factory=list)
    kv_after: list[list[int]] = field(default_factory=list)
    cache_after: list[list[int]] = field(default_factory=list)


def run(
    prompt,
    k,
    max_tokens,
    *,
    target_fn=TARGET,
    draft_fn=None,
    n_ctx=512,
    draft_vocab=V,
    params=GREEDY,
    target_model=None,
    drafter=None,
    eager=False,
) -> Run:
    """eager: the draft model evaluates the prompt before the first token and drafts from the first round
    (by default it waits for the first token, which the target gives alone), so that every round drafts."""
    target = target_model or FakeModel(target_fn, n_vocab=V, n_ctx=n_ctx)
    cached = CachedModel(target)
    if drafter is None and draft_fn is not None:
        model = FakeModel(draft_fn, n_vocab=draft_vocab, n_ctx=n_ctx)
        drafter = RecordingDrafter(model, wait_for_first_token=not eager)
    result = Run([], Stats(), [], target, cached, drafter)
    committed = list(prompt)

    def on_round(event: Round, stats: Stats) -> None:
        assert stats.rounds == event.index, "the stats passed with a round include that round"
        result.before.append(list(committed))
        committed.extend(event.emitted)
        result.rounds.append(event)
        result.kv_after.append(list(target.kv))
        result.cache_after.append(list(cached.tokens))

    out, stats = speculative_decode(
        cached, drafter, prompt, Sampler(params), k=k, max_tokens=max_tokens, on_round=on_round
    )
    result.out, result.stats = out, stats
    assert prompt + out == committed, "the returned tokens are not the emitted tokens of the rounds"
    return result


# -- losslessness -----------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_target_alone_matches_plain_greedy(prompt):
    """k=0 and drafter=None both reproduce plain greedy decoding straight from the logits."""
    expected, reason = reference_greedy(TARGET, prompt, 40)
    alone = run(prompt, 0, 40)
    with_idle_drafter = run(prompt, 0, 40, draft_fn=DraftLM(TARGET))
    assert alone.out == expected and alone.stats.stop_reason == reason
    assert with_idle_drafter.out == expected
    assert with_idle_drafter.drafter.proposals == [] and with_idle_drafter.drafter.model.calls == []


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("draft", sorted(DRAFTS))
def test_greedy_output_is_lossless(k, draft):
    """With any draft and any k, greedy speculative output equals the target-alone output."""
    for prompt in PROMPTS:
        alone = run(prompt, 0, 40)
        spec = run(prompt, k, 40, draft_fn=DRAFTS[draft](TARGET))
        assert spec.out == alone.out, f"prompt {prompt}"
        assert spec.stats.stop_reason == alone.stats.stop_reason == "max_tokens"
        assert len(spec.out) == 40


# -- the first token -------------------------------------------------------------------------------


def test_the_draft_model_waits_for_the_first_token():
    """The first round is the target's own, and the draft model evaluates the prompt only after that token
    is out (as in llama-server): its prefill never delays the first token, and counts as drafting (of the
    second round: `--jsonl`'s round times add up to the reply's). From the second round on it drafts every
    round."""
    target, draft_model = FakeModel(TARGET, n_vocab=V), FakeModel(DraftLM(TARGET, agree_always), n_vocab=V)
    seen = []

    def on_round(event: Round, stats: Stats) -> None:
        seen.append((event.drafted, len(draft_model.calls), event.draft_s))

    def clock() -> float:  # a target eval takes 1 s, a draft-model eval 100 s
        return len(target.calls) + 100.0 * len(draft_model.calls)

    out, stats = speculative_decode(
        CachedModel(target), DraftModelDrafter(draft_model), PROMPTS[0], Sampler(GREEDY), k=4, max_tokens=11,
        on_round=on_round, clock=clock,
    )  # fmt: skip
    assert out == reference_greedy(TARGET, PROMPTS[0], 11)[0]
    assert seen[0] == ([], 0, 0.0)  # the first token: no guesses, no draft-model eval yet
    assert [len(drafted) for drafted, _, _ in seen] == [0, 4, 4]  # 1 + 5 + 5 tokens
    assert [draft_s for _, _, draft_s in seen] == [0.0, 100.0 + 400.0, 400.0]
    warm = draft_model.calls[0]
    assert (warm.kv_before, list(warm.tokens), warm.n_logits) == ([], PROMPTS[0], 0)
    assert stats.first_token_s == 1.0  # the target's prefill, whose last row gives the first token
    assert stats.prefill_s == 1.0  # the target's prefill; the draft model's comes after the first token, and
    assert stats.draft_s == 100.0 + 800.0  # the user waits for it: drafting, with two rounds of 4 draft evals


def test_a_reply_that_ends_at_its_first_token_never_runs_the_draft_model():
    draft_model = FakeModel(DraftLM(TARGET, agree_always), n_vocab=V)
    out, _ = speculative_decode(
        FakeModel(TARGET, n_vocab=V), DraftModelDrafter(draft_model), PROMPTS[0], Sampler(GREEDY), k=4, max_tokens=1
    )
    assert len(out) == 1 and draft_model.calls == []


# -- acceptance patterns ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", KS)
def test_identical_draft_is_always_accepted_with_a_bonus(k):
    """A draft equal to the target: every token accepted, a bonus each round, k+1 tokens per round."""
    n_rounds = 5
    result = run(PROMPTS[0], k, n_rounds * (k + 1), draft_fn=DraftLM(TARGET, agree_always), eager=True)
    stats = result.stats
    assert stats.rounds == n_rounds == len(result.rounds)
    assert stats.acceptance_rate == 1.0
    assert stats.accepted == stats.drafted == n_rounds * k
    assert stats.mean_accepted == k
    assert stats.tokens_per_round == k + 1
    for event in result.rounds:
        assert len(event.drafted) == k and event.accepted == k and event.bonus
        assert event.emitted == [*event.drafted, event.token]
    assert stats.position_rates() == [1.0] * k


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("extra", [1, 2])
def test_identical_draft_shortens_only_the_last_round(k, extra):
    """When max_tokens is not a multiple of k+1, only the last round drafts fewer tokens."""
    max_tokens = 3 * (k + 1) + extra
    result = run(PROMPTS[2], k, max_tokens, draft_fn=DraftLM(TARGET, agree_always), eager=True)
    assert result.stats.rounds == 4
    assert [len(event.emitted) for event in result.rounds] == [k + 1] * 3 + [min(extra, k + 1)]
    last = result.rounds[-1]
    assert len(last.drafted) == min(k, extra - 1) and last.accepted == len(last.drafted)
    assert result.out == reference_greedy(TARGET, PROMPTS[2], max_tokens)[0]


@pytest.mark.parametrize("k", KS)
def test_draft_rejected_at_position_zero_every_round(k):
    """A draft that is always wrong: nothing accepted, one target token per round, same output."""
    max_tokens = 12
    result = run(PROMPTS[0], k, max_tokens, draft_fn=DraftLM(TARGET, agree_never), eager=True)
    stats = result.stats
    assert stats.accepted == 0 and stats.acceptance_rate == 0.0
    assert stats.rounds == max_tokens and stats.tokens_per_round == 1.0
    for event in result.rounds:
        assert event.accepted == 0 and not event.bonus
        assert event.emitted == [event.token]
        assert not event.drafted or event.drafted[0] != event.token
    assert stats.drafted == sum(min(k, max_tokens - i - 1) for i in range(max_tokens))
    assert stats.accepted_at == [0] * k
    assert result.out == reference_greedy(TARGET, PROMPTS[0], max_tokens)[0]


@pytest.mark.parametrize("k", KS)
def test_draft_rejected_in_the_middle(k):
    """A draft right for its first 2 tokens of every round: exactly min(2, drafted) accepted per round."""
    max_tokens = 30
    result = run(PROMPTS[0], k, max_tokens, draft_fn=DraftLM(TARGET, agree_first(2)), eager=True)
    for event in result.rounds:
        assert event.accepted == min(2, len(event.drafted))
        assert event.emitted == [*event.drafted[: event.accepted], event.token]
        if len(event.drafted) > 2:
            assert not event.bonus and event.drafted[2] != event.token
    if k >= 3:
        assert result.stats.accepted_at[:3] == [result.stats.rounds] * 2 + [0]
    assert result.out == reference_greedy(TARGET, PROMPTS[0], max_tokens)[0]


# -- end of generation ------------------------------------------------------------------------------


@pytest.mark.parametrize("k", KS)
def test_eog_inside_an_accepted_draft_stops_generation(k):
    """EOG proposed mid-draft and accepted: the draft stops there, output ends before it, stop 'eog'."""
    prompt = PROMPTS[0]
    offset = 2 * (k + 1) + k // 2  # third round, draft position k // 2
    target = HashLM(n_vocab=V, eog_at=frozenset({len(prompt) + offset}))
    result = run(prompt, k, 100, target_fn=target, draft_fn=DraftLM(target), eager=True)
    assert result.stats.stop_reason == "eog"
    assert result.out == reference_greedy(target, prompt, 100)[0]
    assert len(result.out) == result.stats.generated == offset
    assert EOG not in result.out
    last = result.rounds[-1]
    assert last.drafted[-1] == EOG and len(last.drafted) == k // 2 + 1  # the drafter stopped at EOG
    assert last.accepted == len(last.drafted)
    assert EOG not in last.emitted and last.emitted == last.drafted[:-1]
    assert result.stats.rounds == 3


@pytest.mark.parametrize("k", KS)
def test_eog_as_the_targets_correction_stops_generation(k):
    """The target's own token is EOG after rejecting the draft: it is cut and generation stops."""
    prompt = PROMPTS[2]
    target = HashLM(n_vocab=V, eog_at=frozenset({len(prompt) + 9}))
    draft = DraftLM(target, eog_at=frozenset())  # never proposes EOG
    result = run(prompt, k, 100, target_fn=target, draft_fn=draft)
    assert result.stats.stop_reason == "eog"
    assert result.out == reference_greedy(target, prompt, 100)[0] and len(result.out) == 9
    last = result.rounds[-1]
    assert last.token == EOG and EOG not in last.drafted
    assert last.emitted == last.drafted[: last.accepted]


@pytest.mark.parametrize("k", KS)
def test_rejected_eog_in_draft_does_not_stop_generation(k):
    """An EOG the draft proposes but the target rejects is dropped, and generation goes on."""
    prompt = PROMPTS[0]
    draft = DraftLM(TARGET, eog_at=frozenset(len(prompt) + i for i in (2, 5, 7, 10, 11, 13)))
    result = run(prompt, k, 20, draft_fn=draft)
    assert result.stats.stop_reason == "max_tokens"
    assert result.out == reference_greedy(TARGET, prompt, 20)[0]
    assert any(EOG in event.rejected_tokens for event in result.rounds)
    assert all(EOG not in event.emitted for event in result.rounds)


# -- limits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, *KS])
@pytest.mark.parametrize("max_tokens", [0, 1, 2, 3, 5, 8, 13])
def test_max_tokens_is_exact(k, max_tokens):
    """Never more than max_tokens (exactly max_tokens without EOG), stop 'max_tokens', for every k."""
    for draft in ("copy", "mostly-right"):
        result = run(PROMPTS[0], k, max_tokens, draft_fn=DRAFTS[draft](TARGET))
        assert len(result.out) == result.stats.generated == max_tokens
        assert result.stats.stop_reason == "max_tokens"
        generated = 0
        for event in result.rounds:
            assert len(event.drafted) <= max_tokens - generated - 1
            generated += len(event.emitted)


CTX_CASES = [(16, 5), (16, 15), (12, 1), (20, 9)]  # (n_ctx, prompt length)


@pytest.mark.parametrize("k", [0, *KS])
@pytest.mark.parametrize(("n_ctx", "prompt_len"), CTX_CASES)
def test_context_limit_stops_cleanly(k, n_ctx, prompt_len):
    """A small context ends with stop 'context', never overfills either model, output is target-alone's prefix."""
    prompt = [(3 * i + 2) % V for i in range(prompt_len)]
    prompt = [t if t != EOG else 4 for t in prompt]
    for draft in ("copy", "mostly-right", "always-wrong"):
        result = run(prompt, k, 1000, n_ctx=n_ctx, draft_fn=DRAFTS[draft](TARGET))  # FakeModel asserts n_ctx
        assert result.stats.stop_reason == "context"
        expected, _ = reference_greedy(TARGET, prompt, 1000)
        assert result.out == expected[: len(result.out)]
        assert len(prompt) + len(result.out) >= n_ctx


@pytest.mark.parametrize("k", KS)
def test_context_limit_output_is_lossless(k):
    """At the context limit the speculative output equals target-alone's and the text fits in n_ctx."""
    n_ctx, prompt = 16, [5, 9, 2, 17, 6]
    alone = run(prompt, 0, 1000, n_ctx=n_ctx)
    spec = run(prompt, k, 1000, n_ctx=n_ctx, draft_fn=DraftLM(TARGET, agree_always))
    assert len(prompt) + len(spec.out) <= n_ctx
    assert spec.out == alone.out


@pytest.mark.parametrize("extra", [0, 1, 5])
def test_prompt_that_fills_the_context_raises(extra):
    """A prompt of n_ctx tokens or more raises ContextFullError before touching either model."""
    n_ctx = 10
    target = FakeModel(TARGET, n_vocab=V, n_ctx=n_ctx)
    drafter = RecordingDrafter(FakeModel(DraftLM(TARGET), n_vocab=V, n_ctx=n_ctx))
    with pytest.raises(ContextFullError):
        speculative_decode(target, drafter, [4] * (n_ctx + extra), Sampler(GREEDY), k=4, max_tokens=10)
    assert target.calls == [] and drafter.model.calls == []


def test_empty_prompt_is_rejected():
    """speculative_decode needs at least one prompt token."""
    with pytest.raises(ValueError):
        speculative_decode(FakeModel(TARGET), None, [], Sampler(GREEDY), k=0, max_tokens=5)


# -- batching and KV hygiene ------------------------------------------------------------------------


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("k", [0, *KS])
def test_one_batched_target_eval_per_round(k, eager):
    """The target runs one prefill eval of the whole prompt, whose last row gives the first token (as llama.cpp's
    own generation: no decode of its own), then exactly one eval per round: pending token + draft, all scored.
    A first round that drafts (eager) evaluates its draft alone, after the prefill's row."""
    prompt = PROMPTS[2]
    result = run(prompt, k, 25, draft_fn=DraftLM(TARGET, agree_hashed(0.6)), eager=eager)
    calls = result.target.calls
    assert calls[0].kv_before == [] and calls[0].tokens == prompt and calls[0].n_logits == 1
    first, *rest = result.rounds
    assert bool(first.drafted) == (eager and k > 0)
    assert len(calls) == result.stats.rounds + bool(first.drafted)
    if first.drafted:
        assert (calls[1].kv_before, calls[1].tokens) == (prompt, first.drafted)
        assert calls[1].n_logits == len(first.drafted)
    for call, event, before in zip(calls[1 + bool(first.drafted) :], rest, result.before[1:], strict=True):
        assert call.n_logits == len(event.drafted) + 1
        assert call.tokens == [before[-1], *event.drafted]  # nothing re-evaluated, nothing missing
    assert result.out == reference_greedy(TARGET, prompt, 25)[0]


@pytest.mark.parametrize("k", KS)
def test_target_cache_holds_committed_prefix_plus_this_rounds_draft(k):
    """Target KV = committed text + this round's draft: only rejected drafts beyond it, rolled back next round.

    (The rollback is lazy, so right after a round the KV still holds the rejected tokens of that round;
    they are cut before the next eval, which always starts from a prefix of the committed text.)
    """
    prompt = PROMPTS[0]
    result = run(prompt, k, 30, draft_fn=DraftLM(TARGET, agree_hashed(0.5)))
    text = prompt + result.out
    for event, before, kv, cache in zip(result.rounds, result.before, result.kv_after, result.cache_after, strict=True):
        assert kv == cache, "CachedModel.tokens disagrees with the model's real KV"
        assert kv == before + event.drafted
        kept = len(before) + event.accepted
        assert kv[:kept] == text[:kept]  # the accepted part is committed text
    for call, before in zip(result.target.calls[1:], result.before[1:], strict=True):  # round 1: the prefill's row
        assert call.kv_before == before[:-1]  # rejected tokens are gone before the target sees more
    for n in result.target.truncations:
        assert n <= len(text)


@pytest.mark.parametrize("k", KS)
def test_drafter_cache_never_holds_rejected_tokens_when_drafting(k):
    """Every draft-model eval extends exactly the committed context (+ this round's draft so far)."""
    prompt = PROMPTS[2]
    result = run(prompt, k, 30, draft_fn=DraftLM(TARGET, agree_hashed(0.5)))
    cold, *proposals = result.drafter.proposals
    assert cold.tokens == [] and cold.draft_calls == []  # the first round is the target's own
    assert len(proposals) == sum(1 for event in result.rounds if event.drafted)
    for proposal in proposals:
        assert len(proposal.draft_calls) == len(proposal.tokens)  # one eval per drafted token
        first, *rest = proposal.draft_calls
        assert first.kv_before + first.tokens == proposal.context
        assert 1 <= len(first.tokens) <= 2  # the correction, or the last accepted draft + the bonus
        for j, call in enumerate(rest, start=1):
            assert call.kv_before == proposal.context + proposal.tokens[: j - 1]
            assert call.tokens == [proposal.tokens[j - 1]] and call.n_logits == 1
    assert result.drafter.feedbacks == [(len(e.drafted), e.accepted) for e in result.rounds]


def test_cached_model_reused_across_calls_evaluates_only_the_new_tokens():
    """A second generation on the same CachedModel/drafter (next chat turn) reuses the cache and stays exact."""
    k = 4
    target = FakeModel(TARGET, n_vocab=V)
    cached = CachedModel(target)
    drafter = RecordingDrafter(FakeModel(DraftLM(TARGET, agree_hashed(0.6)), n_vocab=V))
    first, _ = speculative_decode(cached, drafter, PROMPTS[0], Sampler(GREEDY), k=k, max_tokens=15)
    prompt2 = [*PROMPTS[0], *first, 11, 12, 13]
    n_calls = len(target.calls)
    second, _ = speculative_decode(cached, drafter, prompt2, Sampler(GREEDY), k=k, max_tokens=15)
    assert first == reference_greedy(TARGET, PROMPTS[0], 15)[0]
    assert second == reference_greedy(TARGET, prompt2, 15)[0]
    prefill = target.calls[n_calls]
    assert prefill.kv_before + prefill.tokens == prompt2 and prefill.n_logits == 1
    assert len(prefill.kv_before) >= len(PROMPTS[0]) + len(first) - 1 - k


def test_the_prefills_last_row_is_read_once_and_never_after_the_cache_moved():
    """CachedModel keeps the row after its last token: the same context again costs no eval, but a cache someone
    else rolled back (the cost-model probe) or one that moved on is evaluated again, with the same logits."""
    target = FakeModel(TARGET, n_vocab=V)
    cached = CachedModel(target)
    first = cached.feed(PROMPTS[0], 1)
    again = cached.feed(PROMPTS[0], 1)
    assert len(target.calls) == 1 and np.array_equal(first, again)
    again[0, 0] += 1.0  # a caller that changes its rows changes no later caller's
    assert np.array_equal(cached.feed(PROMPTS[0], 1), first) and len(target.calls) == 1
    target.truncate(len(PROMPTS[0]) - 2)
    assert np.array_equal(cached.feed(PROMPTS[0], 1), first) and len(target.calls) == 2
    cached.feed([*PROMPTS[0], 7, 8], 3)  # the kept row and the two new ones
    assert target.calls[-1].tokens == [7, 8] and not cached.holds_row(PROMPTS[0])


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [([], [], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2], [1, 2, 3], 2), ([1, 5, 3], [1, 2, 3], 1)],
)
def test_common_prefix(a, b, n):
    """common_prefix is the length of the longest shared prefix."""
    assert common_prefix(a, b) == n


def test_cached_model_feed_rolls_back_and_recomputes_requested_rows():
    """CachedModel.feed: logits always match a fresh evaluation, even for a context already (or over-) cached."""
    ctx = [4, 8, 15, 16, 23, 31]
    fake = FakeModel(TARGET, n_vocab=V)
    cached = CachedModel(fake)

    def fresh(context, n_logits):
        return FakeModel(TARGET, n_vocab=V).eval(context, n_logits)

    for context, n_logits in [(ctx, 0), (ctx, 1), (ctx, 3), (ctx[:3], 1), ([*ctx[:2], 9, 9], 2), (ctx, 6), ([4], 1)]:
        rows = cached.feed(context, n_logits)
        assert np.array_equal(rows, fresh(context, n_logits))
        assert fake.kv == cached.tokens == context
        assert len(fake.calls[-1].tokens) >= n_logits


# -- round events and statistics --------------------------------------------------------------------


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("draft", ["mostly-right", "mostly-wrong"])
def test_round_events_and_stats_agree(k, draft):
    """Round events add up: accepted+rejected = drafted, emitted = accepted + token (cut at EOG), stats match."""
    prompt = PROMPTS[0]
    target = HashLM(n_vocab=V, eog_at=frozenset({len(prompt) + 33}))
    result = run(prompt, k, 60, target_fn=target, draft_fn=DRAFTS[draft](target))
    stats, rounds = result.stats, result.rounds
    assert [event.index for event in rounds] == list(range(1, stats.rounds + 1))
    for event in rounds:
        assert event.accepted_tokens + event.rejected_tokens == event.drafted
        assert 0 <= event.accepted <= len(event.drafted) <= k
        assert event.bonus == (bool(event.drafted) and event.accepted == len(event.drafted))
        full = [*event.accepted_tokens, event.token]
        cut = full.index(EOG) if EOG in full else len(full)
        assert event.emitted == full[:cut]
        assert event.draft_s >= 0 and event.verify_s >= 0
    assert stats.generated == len(result.out) == sum(len(e.emitted) for e in rounds)
    assert stats.drafted == sum(len(e.drafted) for e in rounds)
    assert stats.accepted == sum(e.accepted for e in rounds)
    assert stats.drafted_at == [sum(len(e.drafted) > i for e in rounds) for i in range(k)]
    assert stats.accepted_at == [sum(e.accepted > i for e in rounds) for i in range(k)]
    assert stats.prompt_tokens == len(prompt)
    assert stats.stop_reason == "eog" and len(result.out) == 33
    assert stats.as_dict()["position_acceptance"] == [round(r, 4) for r in stats.position_rates()]
    by_source = {source: sum(e.source == source for e in rounds) for source in {e.source for e in rounds}}
    assert stats.rounds_by_source == by_source and set(by_source) <= {"spec", "target"}
    assert stats.total_s >= stats.prefill_s >= 0 and stats.first_token_s > 0


@pytest.mark.parametrize("k", [0, 3])
def test_time_to_first_token_ends_with_the_prefill(k):
    """On a clock that moves one second per target eval: the prefill (1) gives the first token off its last row,
    with no verify of its own (it took one more second, as long as a decode step); each later round one."""
    target = FakeModel(TARGET, n_vocab=V)
    drafter = RecordingDrafter(FakeModel(DraftLM(TARGET, agree_hashed(0.6)), n_vocab=V))
    clock = lambda: float(len(target.calls))  # noqa: E731
    _, stats = speculative_decode(target, drafter, PROMPTS[0], Sampler(GREEDY), k=k, max_tokens=20, clock=clock)
    assert stats.rounds >= 3 and stats.prefill_s == 1.0
    assert stats.first_token_s == 1.0 and stats.total_s == stats.rounds
    assert stats.tokens_per_s == (stats.generated - 1) / (stats.rounds - 1)  # the first token's time is the prefill's


def test_the_stats_of_every_round_carry_the_time_so_far():
    """The live footer's tok/s is the reply's own (the tokens after the first over the time after the prefill,
    which gives the first): for that, each round's stats carry the time so far (total_s was 0 until the reply
    ended). After the first token alone it reads 0, not that token over the microseconds of its sampling."""
    target = FakeModel(TARGET, n_vocab=V)
    clock = lambda: float(len(target.calls))  # noqa: E731  one second per target eval
    seen = []
    speculative_decode(
        target, None, PROMPTS[0], Sampler(GREEDY), k=0, max_tokens=4, clock=clock,
        on_round=lambda _round, stats: seen.append((stats.total_s, stats.tokens_per_s)),
    )  # fmt: skip
    assert seen == [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0)]


def test_the_live_footer_speed_is_the_replys_as_the_line_under_it():
    """The footer divided the tokens by draft + verify time alone, leaving out the view's drawing and the
    sampling: it read faster all the reply long than the line that replaced it at the end."""
    from specchat.statsview import footer, summary_line

    stats = Stats(generated=10, rounds=10, prefill_s=1.0, total_s=3.0, draft_s=0.2, verify_s=0.8)
    assert "5.0 tok/s" in footer(stats, "target alone").plain
    assert "5.0 tok/s" in summary_line(stats, "target alone").plain


def test_stats_merge_adds_every_count_and_per_position_and_per_source_totals():
    """Session totals and tune add generations with different k and sources: nothing is dropped."""
    first, second = Stats(), Stats()
    first.record(2, 1, 2, 0.1, 0.2, "spec")
    first.record(0, 0, 1, 0.0, 0.1)
    second.record(4, 4, 5, 0.3, 0.4, "ngram")
    second.record(1, 0, 1, 0.1, 0.1, "spec")
    first.merge(second)
    assert (first.rounds, first.generated, first.drafted, first.accepted) == (4, 9, 7, 5)
    assert first.draft_s == pytest.approx(0.5) and first.verify_s == pytest.approx(0.8)
    assert first.drafted_at == [3, 2, 1, 1] and first.accepted_at == [2, 1, 1, 1]
    assert first.rounds_by_source == {"spec": 2, "target": 1, "ngram": 1}


def test_stats_merge_adds_the_prefill_and_total_times():
    first, second = Stats(prefill_s=0.5, total_s=2.0), Stats(prefill_s=0.25, total_s=1.0)
    first.merge(second)
    assert (first.prefill_s, first.total_s) == (0.75, 3.0)


def test_the_drafter_is_prefilled_with_what_the_target_was_all_but_the_last_prompt_token():
    """The last prompt token opens the first verify batch; prompt lookup counts the reply from after it."""

    class Recording(NgramDrafter):
        def prefill(self, context):
            self.prefilled = list(context)
            super().prefill(context)

    drafter = Recording()
    speculative_decode(FakeModel(TARGET, n_vocab=V), drafter, PROMPTS[0], Sampler(GREEDY), k=3, max_tokens=4)
    assert drafter.prefilled == PROMPTS[0][:-1]


def test_target_alone_with_a_k_measures_no_draft_position():
    """No drafter: k is moot, and no position is reported as drafted (not even as None)."""
    _, stats = speculative_decode(FakeModel(TARGET, n_vocab=V), None, PROMPTS[0], Sampler(GREEDY), k=4, max_tokens=5)
    assert stats.drafted_at == [] and stats.as_dict()["position_acceptance"] == []


# -- interruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("on_call", [1, 2, 4, 6])
@pytest.mark.parametrize("appended", [0, 1])
def test_keyboard_interrupt_in_target_returns_tokens_so_far(k, on_call, appended):
    """Ctrl-C inside a target eval: stop 'interrupted', the tokens of the finished rounds, and a cache that reuses."""
    prompt = PROMPTS[0]
    target = FakeModel(TARGET, n_vocab=V, interrupt_on_call=on_call, interrupt_after_append=appended)
    drafter = RecordingDrafter(FakeModel(DraftLM(TARGET, agree_hashed(0.6)), n_vocab=V))
    result = run(prompt, k, 40, target_model=target, drafter=drafter)
    expected, _ = reference_greedy(TARGET, prompt, 40)
    assert result.stats.stop_reason == "interrupted"
    # Call 1 is the prefill, whose last row gives the first token: round 1 needs no call (the draft model
    # waits for that token), each later round one.
    assert result.stats.rounds == len(result.rounds) == on_call - 1
    assert result.out == expected[: len(result.out)]
    assert len(result.out) == result.stats.generated == sum(len(e.emitted) for e in result.rounds)
    # The same cache and drafter continue exactly (the KV may hold part of the interrupted batch).
    target.interrupt_on_call = None
    prompt2 = prompt + result.out
    rest, stats = speculative_decode(
        result.cached, drafter, prompt2, Sampler(GREEDY), k=k, max_tokens=40 - len(result.out)
    )
    assert result.out + rest == expected and stats.stop_reason == "max_tokens"


@pytest.mark.parametrize("on_call", [1, 2, 5])
def test_keyboard_interrupt_in_draft_model_returns_tokens_so_far(on_call):
    """Ctrl-C while drafting also stops with 'interrupted' and the committed tokens."""
    prompt = PROMPTS[2]
    draft_model = FakeModel(DraftLM(TARGET, agree_hashed(0.6)), n_vocab=V, interrupt_on_call=on_call)
    result = run(prompt, 4, 40, drafter=RecordingDrafter(draft_model))
    assert result.stats.stop_reason == "interrupted"
    assert result.out == reference_greedy(TARGET, prompt, 40)[0][: len(result.out)]
    assert len(result.out) < 40


# -- foreign draft ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("extra", [8, 2])  # the foreign id is V + extra - 2: with 2, exactly n_vocab
def test_draft_ids_outside_the_target_vocabulary_are_dropped(k, extra):
    """A draft id >= the target's n_vocab is cut with everything after it; the target never sees it."""
    prompt = PROMPTS[0]
    foreign = frozenset(range(len(prompt), len(prompt) + 60, 3))
    draft = DraftLM(TARGET, agree_always, n_vocab=V + extra, foreign_at=foreign)
    result = run(prompt, k, 30, draft_fn=draft, draft_vocab=V + extra, eager=True)  # the fake target asserts ids < V
    assert result.out == reference_greedy(TARGET, prompt, 30)[0]
    proposals = iter(result.drafter.proposals)
    generated, saw_foreign = 0, False
    for event in result.rounds:
        assert all(0 <= t < V for t in event.drafted)
        if min(k, 30 - generated - 1) > 0:
            proposal = next(proposals)
            cut = next((i for i, t in enumerate(proposal.tokens) if t >= V), len(proposal.tokens))
            saw_foreign |= cut < len(proposal.tokens)
            assert event.drafted == proposal.tokens[:cut]
        generated += len(event.emitted)
    assert next(proposals, None) is None
    assert saw_foreign


def test_foreign_ids_with_sampling_and_a_bigger_draft_vocabulary():
    """Sampling with a draft vocabulary bigger than the target's: valid ids only, reproducible per seed."""
    prompt = PROMPTS[0]
    params = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=1234)
    draft = DraftLM(TARGET, agree_hashed(0.7), n_vocab=V + 8, foreign_at=frozenset({6, 9, 13}))
    outs = [run(prompt, 4, 30, draft_fn=draft, draft_vocab=V + 8, params=params).out for _ in range(2)]
    assert outs[0] == outs[1]
    assert len(outs[0]) == 30 and all(0 <= t < V and t != EOG for t in outs[0])


# -- sampling end to end ----------------------------------------------------------------------------


def test_sampled_speculative_decode_keeps_the_target_distribution():
    """Sampling end to end (draft model + verifier): the first two tokens follow the target's joint distribution."""
    n_vocab, prompt, runs = 5, [2, 3], 4000
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=99)
    target_fn = HashLM(n_vocab=n_vocab, salt=1)
    draft_fn = HashLM(n_vocab=n_vocab, salt=2)  # an unrelated draft distribution
    sampler = Sampler(params)
    counts = np.zeros((n_vocab, n_vocab))
    for _ in range(runs):
        target = FakeModel(target_fn, n_vocab=n_vocab)
        drafter = RecordingDrafter(FakeModel(draft_fn, n_vocab=n_vocab), wait_for_first_token=False)
        out, _ = speculative_decode(target, drafter, prompt, sampler, k=2, max_tokens=3)
        counts[out[0], out[1]] += 1
    p0 = probabilities(target_fn(tuple(prompt)), params)
    joint = np.array([p0[a] * probabilities(target_fn((*prompt, a)), params) for a in range(n_vocab)])
    assert chisquare_pvalue(counts, joint) > 0.001


def test_sampled_foreign_draft_ids_keep_the_target_distribution():
    """Sampling with a draft that puts mass on foreign ids: the first token still follows the target's p."""
    n_vocab, runs = 4, 3000
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)
    target_row = np.array([0.0, -40.0, 0.0, 0.0])  # p = 1/3 on 0, 2, 3 (1 is EOG)
    draft_row = np.array([0.0, -40.0, -40.0, -40.0, -40.0, 0.0])  # q = 1/2 on 0 and on the foreign id 5
    sampler = Sampler(params)
    counts = np.zeros(n_vocab)
    for _ in range(runs):
        target = FakeModel(lambda ctx: target_row, n_vocab=n_vocab)
        drafter = RecordingDrafter(FakeModel(lambda ctx: draft_row, n_vocab=len(draft_row)), wait_for_first_token=False)
        out, _ = speculative_decode(target, drafter, [0, 2], sampler, k=1, max_tokens=2)
        counts[out[0]] += 1
    assert chisquare_pvalue(counts, probabilities(target_row, params)) > 0.001


@pytest.mark.parametrize("how", ["auto's stop", "--p-min"])
def test_a_draft_that_stops_where_it_is_unsure_keeps_the_target_distribution(how):
    """Sampling through a draft model that stops where it is unsure (auto's stop: while its chances stay
    above a bar; `--p-min 0.35`), so whether the second guess is kept depends on which first token was
    drawn. The first two tokens still follow the target's joint distribution. (Judging a guess by
    q[guess] instead of by q's peak fails this, p < 1e-90: keeping only likely draws proposes from
    another distribution than q.)"""
    n_vocab, prompt, runs = 5, [2, 3], 4000
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    target_fn = HashLM(n_vocab=n_vocab, salt=1)
    draft_fn = HashLM(n_vocab=n_vocab, salt=3)
    sampler = Sampler(params)
    counts = np.zeros((n_vocab, n_vocab))
    lengths = set()
    bar = (0.4, 0.25)

    class Stopping(DraftModelDrafter):
        def propose(self, context, k, sampler):
            if how == "--p-min":
                draft = super().propose(context, k, sampler)
            else:
                draft = super().propose(
                    context, k, sampler, stop=lambda c: None if c[-1] > bar[len(c) - 1] else len(c) - 1
                )
            lengths.add(len(draft))
            return draft

    p_min = 0.35 if how == "--p-min" else 0.0
    for _ in range(runs):
        target = FakeModel(target_fn, n_vocab=n_vocab)
        drafter = Stopping(FakeModel(draft_fn, n_vocab=n_vocab), p_min=p_min, wait_for_first_token=False)
        out, _ = speculative_decode(target, drafter, prompt, sampler, k=2, max_tokens=3)
        counts[out[0], out[1]] += 1
    assert {1, 2} <= lengths  # some two-token drafts were cut short, others not
    p0 = probabilities(target_fn(tuple(prompt)), params)
    joint = np.array([p0[a] * probabilities(target_fn((*prompt, a)), params) for a in range(n_vocab)])
    assert chisquare_pvalue(counts, joint) > 0.001


def test_a_stop_that_drops_earlier_sampled_guesses_keeps_only_the_newest_decision():
    """A stop that, seeing the second guess's chance, would drop the first too (auto's draft_on can, on
    costs where a batch of 2 was never timed) must not: the second position's peak depends on the token
    drawn first, so dropping the first by it keeps likely draws only. With sampling only the newest
    guess goes; the first token still follows the target's distribution (p ~ 1e-232 without this)."""
    from fakes import LOW

    n_vocab, prompt, runs = 6, [2, 3], 4000
    target_fn = HashLM(n_vocab=n_vocab, salt=1)

    def draft_fn(context):
        row = np.zeros(n_vocab)
        row[EOG] = LOW
        if len(context) == len(prompt) + 1 and context[-1] in (0, 2):
            row[4] = 8.0  # sure after a first draw of 0 or 2, flat after the others
        return row

    from specchat.costmodel import Costs

    costs = Costs({1: 1.0, 3: 1.4}, 0.01, 1.0, 1.0)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    sampler = Sampler(params)
    counts = np.zeros(n_vocab)
    lengths = set()

    class Costed(DraftModelDrafter):
        def propose(self, context, k, sampler):
            draft = super().propose(context, k, sampler, stop=lambda c: costs.draft_on(c, k, 0.01, 0.0, (0.9, 0.9)))
            lengths.add(len(draft))
            return draft

    for _ in range(runs):
        drafter = Costed(FakeModel(draft_fn, n_vocab=n_vocab), wait_for_first_token=False)
        out, _ = speculative_decode(FakeModel(target_fn, n_vocab=n_vocab), drafter, prompt, sampler, k=2, max_tokens=3)
        counts[out[0]] += 1
    assert {1, 2} <= lengths
    assert chisquare_pvalue(counts, probabilities(target_fn(tuple(prompt)), params)) > 0.001


def test_a_draft_that_lacks_some_target_tokens_reads_stand_ins_and_the_output_is_the_targets():
    """The pair check lets a draft know up to 128 fewer tokens than the target; a target token beyond the
    draft's vocabulary reached the draft's decode, which failed (and the reply with it)."""
    from fakes import LOW, hash_row

    def target_fn(context):
        row = hash_row(context, 40).copy()
        row[EOG] = LOW  # a reply long enough to meet those tokens
        return row

    def draft_fn(context):
        return target_fn(context)[:32]  # the same model, without the target's last 8 tokens

    for prompt in PROMPTS:
        alone = run(prompt, 0, 60, target_model=FakeModel(target_fn, n_vocab=40))
        assert any(token >= 32 for token in alone.out)  # the case in question occurs
        drafter = DraftModelDrafter(FakeModel(draft_fn, n_vocab=32))
        spec = run(prompt, 4, 60, target_model=FakeModel(target_fn, n_vocab=40), drafter=drafter)
        assert spec.out == alone.out and spec.stats.accepted > 0


class _InterruptedRollback(FakeModel):
    """A Ctrl-C that lands just as llama.cpp has removed the cells: truncate raises after its work."""

    def truncate(self, n: int) -> None:
        super().truncate(n)
        if self.interrupt_on_call == -1:
            self.interrupt_on_call = None
            raise KeyboardInterrupt


def test_a_ctrl_c_inside_the_rollback_leaves_the_cache_saying_what_it_holds():
    """CachedModel recorded the kept prefix only after the rollback returned: a KeyboardInterrupt inside it left
    `tokens` claiming the removed cells, and a next context that agreed with them past the cut was fed on top
    of cells that were gone."""
    model = _InterruptedRollback(logits_fn=TARGET, n_vocab=V)
    cache = CachedModel(model)
    cache.feed([5, 9, 2, 17, 8, 8], 1)
    model.interrupt_on_call = -1
    with pytest.raises(KeyboardInterrupt):
        cache.feed([5, 9, 2, 3], 1)  # rolls back to 3 tokens, and is stopped there
    assert cache.tokens == model.kv == [5, 9, 2]
    rows = cache.feed([5, 9, 2, 17, 8, 8, 1], 1)  # agrees with what was removed: it must be evaluated again
    assert model.kv == [5, 9, 2, 17, 8, 8, 1]
    assert np.allclose(rows[0], TARGET(tuple(model.kv)))
