"""auto's rules on fake machines with a virtual clock (issue: auto keeps its promise on any machine).

The real loop, the real drafters and controller run on fake models whose every eval advances a virtual
clock by what that batch costs on the machine being imitated, so "faster" and "slower" are exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from fakes import Clock, DraftLM, FakeModel, HashLM, agree_hashed, agree_never

from specchat import tunemeasure, tuning, tuningsave
from specchat.costmeasure import measure
from specchat.costmodel import Costs
from specchat.drafters import DraftModelDrafter, NgramDrafter
from specchat.drafters.auto import AutoDrafter, Guard
from specchat.drafters.autoguard import EXPLORE_SHARE
from specchat.drafters.base import Draft, Drafter, Offer, Outcome
from specchat.models_api import CachedModel
from specchat.sampling import Sampler, SamplingParams
from specchat.speculative import speculative_decode

V = 64
SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass
class Machine:
    """A cost regime: v(n) per batch size, c per draft step, in target steps; `load` slows everything."""

    v: dict[int, float]
    c: float
    load: float = 1.0

    def batch(self, n: int) -> float:
        return Costs(self.v).v(n) * self.load

    def costs(self) -> Costs:
        """What a quiet calibration of this machine would say (1 target step = 1 s)."""
        return Costs(dict(self.v), self.c, 1.0, 1.0)


XEON = Machine(
    {1: 1, 2: 1.5, 3: 1.8, 4: 2.0, 5: 2.2, 6: 2.4, 8: 2.8, 12: 3.6, 16: 4.75, 24: 6.5, 32: 8, 48: 11, 64: 14}, 0.45
)
GPU = Machine({n: 1 + 0.01 * n for n in SIZES}, 0.1)
CPU_BOUND = Machine({n: float(n) for n in SIZES}, 0.6)


class QuietLoad:
    """No other process: what /proc would say on an idle machine (the real one may be busy in CI)."""

    def busy(self) -> bool:
        return False


class BusyLoad:
    """Other programs kept the CPUs busy (a second terminal's reply, a compiler)."""

    def busy(self) -> bool:
        return True


class TimedModel:
    """A FakeModel whose evals cost virtual time: the target per batch size, the draft per token."""

    def __init__(self, inner: FakeModel, clock: Clock, cost) -> None:
        self.inner, self.clock, self.cost = inner, clock, cost
        self.n_ctx, self.n_vocab = inner.n_ctx, inner.n_vocab

    @property
    def n_past(self) -> int:
        return self.inner.n_past

    def eval(self, tokens, n_logits):
        self.clock.t += self.cost(len(tokens))
        return self.inner.eval(tokens, n_logits)

    def truncate(self, n: int) -> None:
        self.inner.truncate(n)

    def is_eog(self, token: int) -> bool:
        return self.inner.is_eog(token)

    def tokenize(self, text: str) -> list[int]:
        return [2 + b % (V - 2) for b in text.encode()]


def decode_seconds(machine: Machine, agree, *, auto: bool, costs: Costs | None = None, n=128, prompt=None, params=None):
    """Virtual decode time of n tokens (prefill excluded), target alone or auto with a draft model; greedy
    unless `params` say otherwise."""
    clock = Clock()
    target_fn = HashLM(n_vocab=V)
    target = TimedModel(FakeModel(target_fn, n_vocab=V, n_ctx=2048), clock, machine.batch)
    draft = TimedModel(
        FakeModel(DraftLM(target_fn, agree), n_vocab=V, n_ctx=2048), clock, lambda m: machine.c * machine.batch(m)
    )
    drafter = None
    if auto:
        arms = [DraftModelDrafter(draft), NgramDrafter()]
        drafter = AutoDrafter(costs or machine.costs(), arms, clock=clock)
    prompt = prompt or [5, 6, 7, 8, 9, 10, 11, 12]
    _, stats = speculative_decode(
        CachedModel(target), drafter, prompt, Sampler(params or SamplingParams()), k=64, max_tokens=n, clock=clock
    )
    assert stats.generated == n
    return stats.decode_s, stats


def test_a_low_acceptance_reply_costs_almost_nothing():
    """Prose on a CPU where the draft model pays only on code: ~50% acceptance must not make auto slower."""
    alone, _ = decode_seconds(XEON, agree_hashed(0.5), auto=False)
    mine, stats = decode_seconds(XEON, agree_hashed(0.5), auto=True)
    assert mine <= 1.03 * alone
    assert stats.rounds_by_source.get("spec", 0) <= 0.1 * stats.rounds


def test_a_good_draft_model_on_a_gpu_is_used_and_wins():
    alone, _ = decode_seconds(GPU, agree_hashed(0.9), auto=False)
    mine, stats = decode_seconds(GPU, agree_hashed(0.9), auto=True)
    assert mine < alone / 2
    assert stats.rounds_by_source["spec"] > stats.rounds / 2


def first_round(machine: Machine, prompt_len: int):
    """(source of the first round, draft-model evals before it ended, stats) of auto on this machine."""
    clock = Clock()
    target_fn = HashLM(n_vocab=V)
    target = TimedModel(FakeModel(target_fn, n_vocab=V, n_ctx=2048), clock, machine.batch)
    draft_model = FakeModel(DraftLM(target_fn, agree_hashed(0.9)), n_vocab=V, n_ctx=2048)
    draft = TimedModel(draft_model, clock, lambda m: machine.c * machine.batch(m))
    drafter = AutoDrafter(machine.costs(), [DraftModelDrafter(draft), NgramDrafter()], clock=clock)
    seen = []

    def on_round(event, stats) -> None:
        seen.append((event.source, len(draft_model.calls)))

    prompt = [3 + i % (V - 3) for i in range(prompt_len)]
    _, stats = speculative_decode(
        CachedModel(target), drafter, prompt, Sampler(SamplingParams()), k=64, max_tokens=32, on_round=on_round,
        clock=clock,
    )  # fmt: skip
    return *seen[0], stats, len(draft_model.calls)


def test_auto_keeps_a_draft_models_prefill_out_of_the_first_token_where_it_is_dear():
    """On a CPU the draft model's prefill of a long prompt costs many target steps: the first token is the
    target's alone, and the draft model reads the prompt only if auto ever drafts with it. Here it never
    does (a 300-token read for a 32-token reply): read at once, it cost a third of the reply's time."""
    source, draft_evals, stats, evals = first_round(XEON, 300)
    assert source != "spec" and draft_evals == 0  # the target alone, or a copy of the (repetitive) prompt
    assert stats.first_token_s <= XEON.batch(300) + XEON.batch(64)
    assert stats.prefill_s == pytest.approx(XEON.batch(300))  # the whole prompt: its last row gives the first token
    assert stats.rounds_by_source.get("spec", 0) == 0 and evals == 0


def test_a_draft_model_that_pays_reads_a_long_prompt_after_the_first_token_and_drafts():
    """On a GPU the same reading is worth it: auto reads the prompt in the draft model once the first token
    is out (drafting's time, not the first token's) and drafts with it."""
    source, draft_evals, stats, evals = first_round(GPU, 1500)
    assert source != "spec" and draft_evals == 0 and evals > 0
    assert stats.first_token_s <= GPU.batch(1499) + GPU.batch(65)  # the draft model read nothing before it
    assert stats.rounds_by_source["spec"] >= stats.rounds / 2
    assert stats.draft_s >= GPU.c * GPU.batch(1499)


DESKTOP = Machine({1: 1, 2: 1.02, 3: 1.03, 4: 1.04, 5: 1.05, 6: 1.07, 8: 1.1, 16: 2.06, 32: 3.98, 64: 7.82}, 0.3)


def test_a_draft_model_that_pays_on_its_plain_estimate_reads_the_prompt_at_once():
    """On a desktop CPU a draft model that has not drafted yet pays on its plain estimate, not on its
    cautious one: read only when chosen, it was never chosen (so never learned that it pays) and the
    reply ran on copies and the target alone; it reads the prompt once the first token is out."""
    source, draft_evals, stats, evals = first_round(DESKTOP, 80)
    assert source != "spec" and draft_evals == 0 and evals > 0
    assert stats.rounds_by_source.get("spec", 0) >= stats.rounds / 2


def test_auto_drafts_the_first_round_with_a_cold_draft_model_where_its_prefill_is_cheap():
    """On a GPU a short prompt costs the draft model a fraction of a step: worth it, charged in full. Its
    reading of the prompt is prefill (in the first token's time, as auto chose), not drafting, and no
    later catch-up is booked as prefill."""
    source, draft_evals, stats, _ = first_round(GPU, 12)
    assert source == "spec" and draft_evals > 1
    reading = GPU.c * GPU.batch(11)  # the prompt but its last token, which the first draft step reads
    assert stats.prefill_s == pytest.approx(GPU.batch(12) + reading)  # the target's: the whole prompt
    assert stats.first_token_s > stats.prefill_s
    assert stats.draft_s + stats.verify_s == pytest.approx(stats.decode_s)


def test_the_guard_sets_aside_a_drafter_whose_real_cost_is_higher_than_calibrated():
    """The calibration says GPU (batches and draft steps nearly free) but the machine is compute-bound:
    measured time, not the cost model, switches the draft model off within a few rounds."""
    alone, _ = decode_seconds(CPU_BOUND, agree_hashed(0.7), auto=False, n=400)
    mine, stats = decode_seconds(CPU_BOUND, agree_hashed(0.7), auto=True, costs=GPU.costs(), n=400)
    assert mine <= 1.25 * alone  # calibration wrong 4-7x; set aside for 16, 32, 64... rounds at a time
    assert stats.rounds_by_source.get("spec", 0) <= 8


def test_the_guard_sets_aside_a_losing_draft_model_with_sampling_too():
    """The same wrong calibration with a sampled reply: guesses are accepted by chance, not by equality,
    and the guard, which reads only the clock, still switches the draft model off within a few rounds."""
    sampled = SamplingParams(temperature=0.8, seed=3)
    alone, _ = decode_seconds(CPU_BOUND, agree_hashed(0.7), auto=False, n=400, params=sampled)
    mine, stats = decode_seconds(CPU_BOUND, agree_hashed(0.7), auto=True, costs=GPU.costs(), n=400, params=sampled)
    assert stats.rounds_by_source.get("spec", 0) >= 1  # it was used
    assert mine <= 1.25 * alone
    assert stats.rounds_by_source.get("spec", 0) <= 8


def test_the_guard_judges_a_drafter_after_a_round_it_lost_not_after_one_it_won():
    """Two copies that broke at once, then one that held for 16 tokens: on the winning round the decayed
    sum still looks slow, but a round that beat the target alone is no evidence of losing now (a rename
    breaks a copy at each renamed word and the copy then holds). The next loss does set it aside."""
    guard = Guard()
    for _ in range(3):
        guard.record("target", 1, 1.0, 1.0)
    guard.record("ngram", 2, 8.0, 1.0)
    guard.record("ngram", 2, 8.0, 1.0)
    guard.record("ngram", 16, 8.0, 1.0)
    assert guard.allowed("ngram") and guard.trusted("ngram")
    guard.record("ngram", 2, 8.0, 1.0)
    assert not guard.allowed("ngram")


def test_the_guard_sets_a_loser_aside_longer_each_time_and_judges_it_afresh_when_it_comes_back():
    guard = Guard()
    guard.record("target", 1, 1.0, 1.0)  # the target alone: 1 s a token

    def lose(times: int) -> None:  # rounds of 2 s a token
        for _ in range(times):
            guard.record("ngram", 1, 2.0, 1.0)

    def wait(rounds: int) -> None:
        for _ in range(rounds):
            guard.record("target", 1, 1.0, 1.0)

    lose(2)
    assert guard.allowed("ngram")  # under GUARD_ROUNDS rounds of evidence: no verdict yet
    lose(1)
    assert not guard.allowed("ngram")  # set aside at round 4 for 16 rounds
    wait(15)
    assert not guard.allowed("ngram")
    wait(1)
    assert guard.allowed("ngram") and not guard.trusted("ngram")  # back at round 20, as a trial
    lose(1)
    assert guard.allowed("ngram")  # judged afresh: one loss is not yet evidence
    lose(1)
    assert guard.allowed("ngram")
    lose(1)
    assert not guard.allowed("ngram")  # set aside again at round 23, now for 32 rounds
    wait(31)
    assert not guard.allowed("ngram")
    wait(1)
    assert guard.allowed("ngram")


def test_the_guard_pauses_a_lookup_whose_rounds_cost_what_the_model_said_only_briefly():
    """A copy that breaks early costs its whole batch, and a few of those look like losing; but where each
    round took what the cost model said, the costs held and the copies broke, which a lookup's odds learn
    from every offer. Set aside for 16-32 rounds, it sat out while an edit copied 39 tokens (trace n8 on
    the Zen 4); it now pauses for 4, every time, which still stops a run of breaks (a rename that breaks
    every few tokens). Rounds slower than predicted, or a draft model's, are judged as before."""

    def three_losses(source: str, seconds: float, lookup: bool) -> Guard:
        guard = Guard()
        guard.record("target", 1, 1.0, 1.0)
        for _ in range(3):  # a batch of 16 predicted at 8 s gave 2 tokens: 4 s a token
            guard.record(source, 2, seconds, 1.0, predicted=8.0, lookup=lookup)
        return guard

    def back_after(guard: Guard, source: str) -> int:
        for rounds in range(100):
            if guard.allowed(source):
                return rounds
            guard.record("target", 1, 1.0, 1.0)
        raise AssertionError("never back")

    assert back_after(three_losses("ngram", 8.0, lookup=True), "ngram") == 4
    assert back_after(three_losses("ngram", 8.0 * 1.5, lookup=True), "ngram") == 16  # the costs did not hold
    assert back_after(three_losses("spec", 8.0, lookup=False), "spec") == 16


def test_auto_tells_the_guard_what_a_round_should_have_cost():
    """AutoDrafter passes the cost model's prediction of each round, so the guard can tell a broken copy
    (as predicted) from wrong costs (slower)."""
    costs = Costs({1: 1.0, 2: 1.5, 4: 2.5}, None, 0.1, 0.1)
    auto = AutoDrafter(costs, [NgramDrafter()], clock=lambda: 0.0)
    seen = []
    auto.guard.record = lambda *args, **kwargs: seen.append((args, kwargs))
    draft = Draft([1, 2, 3], [None] * 3, source="ngram")
    auto.learn(Outcome(at=10, draft=draft, accepted=0, produced=[9], verify_s=0.25))
    (source, tokens, seconds, _step), extra = seen[0][0][:4], seen[0][0][4:]
    assert (source, tokens, seconds) == ("ngram", 1, 0.25)
    predicted, lookup = extra
    assert predicted == pytest.approx(0.25) and lookup  # v(4) = 2.5 steps of 0.1 s


def test_the_guard_asks_for_the_target_alone_every_32_rounds():
    guard = Guard()
    guard.record("target", 1, 1.0, 1.0)
    for _ in range(31):
        guard.record("ngram", 4, 1.0, 1.0)  # winning rounds
        assert not guard.needs_reference()
    guard.record("ngram", 4, 1.0, 1.0)
    assert guard.needs_reference()  # 32 rounds since the target alone ran


class FixedOffer:
    """A lookup drafter that offers the same estimates every round (auto's choice on its own)."""

    name, uses_model = "ngram", False

    def __init__(self, offer: Offer) -> None:
        self.fixed = offer

    def offer(self, context, k_max: int) -> Offer:
        return self.fixed

    def reset(self) -> None:
        pass  # it learns nothing


def test_auto_drafts_only_where_the_cautious_estimate_promises_a_gain_too():
    """A plain estimate that pays is not enough: the cautious one (below the mean) must pay as well."""
    doubtful = Offer([0.0] * 8, [0.0] * 8, mean=[0.99] * 8)
    assert AutoDrafter(GPU.costs(), [FixedOffer(doubtful)]).choose([1, 2, 3], 8).source == "target"
    sure = Offer([0.9] * 8, [0.9] * 8, mean=[0.99] * 8)
    assert AutoDrafter(GPU.costs(), [FixedOffer(sure)]).choose([1, 2, 3], 8).source == "ngram"


# A 2-core Zen 4 as measured on 2026-12-03 (benchmarks/measure_regime.py): from 8 rows on llama.cpp's
# tiled kernel makes a batch cost nearly as much as 16, so the curve is lumpy, not convex.
ZEN4 = Machine(
    {1: 1, 2: 1.79, 3: 2.69, 4: 3.03, 5: 3.65, 6: 4.45, 8: 7.06, 12: 8.77, 16: 9.66, 24: 13.6, 32: 13.5}, 0.62
)


def test_auto_takes_the_best_length_that_pays_for_sure_when_the_best_one_only_might():
    """A copy that has held 13 tokens: the plain estimate ranks 15 more tokens first (1.33x), but that
    batch of 16 pays only if the copy is as good as the mean says, while 3 tokens pay even on the
    cautious estimate. auto drafts the 3, not nothing (it used to run the target alone, round after
    round, until the match grew long enough for the 16 to be safe)."""
    copy = Offer([0.92] * 15, [0.92] * 15, mean=[0.97] * 15)
    costs = ZEN4.costs()
    assert costs.best_length(copy.mean, 0.0) == (15, pytest.approx(1.33, abs=0.01))
    assert costs.speedup(copy.rates, 0.0)[15] < 1.0 < costs.speedup(copy.rates, 0.0)[3]
    choice = AutoDrafter(costs, [FixedOffer(copy)]).choose([1, 2, 3], 64)
    assert (choice.source, choice.k) == ("ngram", 3)
    # ... ranked against other drafters by what it promises for sure, not by the 16 it passed over.
    assert choice.speedup == pytest.approx(costs.speedup(copy.rates, 0.0)[3], rel=1e-3)


def test_auto_runs_the_target_alone_when_the_guard_needs_a_reference():
    auto = AutoDrafter(GPU.costs(), [FixedOffer(Offer([0.9] * 8, [0.9] * 8))])
    assert auto.choose([1, 2, 3], 8).source == "ngram"
    auto.guard.round = 32  # 32 rounds without the target alone
    choice = auto.choose([1, 2, 3], 8)
    assert (choice.source, choice.k) == ("target", 0) and "reference" in choice.reason


def test_a_drafter_once_set_aside_drafts_no_further_than_it_vouches_for():
    """On a GPU a drafter may draft past what it vouches for (batches cost little more); not once it
    has lost time, since then the costs are in doubt."""
    auto = AutoDrafter(GPU.costs(), [])
    offer = Offer([0.99] * 8, [0.99] * 8, mean=[0.99] * 8, proven=2)
    assert len(auto._within_reach(offer, "ngram").rates) == 8
    auto.guard.times_aside["ngram"] = 1
    assert len(auto._within_reach(offer, "ngram").rates) == 2


def test_exploration_costs_at_most_its_budget():
    """An untried draft model that might pay (optimistically) but never does: trying it is bounded."""
    maybe = Machine({n: 1 + 0.01 * n for n in SIZES}, 0.5)
    alone, _ = decode_seconds(maybe, agree_never, auto=False, n=400)
    mine, stats = decode_seconds(maybe, agree_never, auto=True, n=400)
    assert stats.rounds_by_source.get("spec", 0) >= 1  # it was tried
    assert mine <= (1 + EXPLORE_SHARE) * alone + 2.0  # and cost at most the budget (+ one round)


def test_a_busy_calibration_keeps_its_ratios_and_says_it_was_busy():
    """Load that comes and goes during calibration: every batch is timed next to a single step, so the
    ratios hold; the single steps disagree, so the result is marked busy (not saved, not trusted) even
    where /proc cannot tell."""
    clock = Clock()

    def cost(n):  # another program takes the CPUs for 40 steps, leaves them for 40, and so on
        return XEON.batch(n) * (4.0 if int(clock.t // 40) % 2 else 1.0)

    target = TimedModel(FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=512), clock, cost)
    costs = measure(target, None, list(range(2, 40)), SIZES, repeats=3, clock=clock, load=QuietLoad())
    assert costs.busy
    for n in (2, 8, 16, 64):
        assert costs.v(n) == pytest.approx(XEON.v[n], rel=0.05)
    quiet_clock = Clock()
    quiet_target = TimedModel(FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=512), quiet_clock, XEON.batch)
    quiet = measure(quiet_target, None, list(range(2, 40)), SIZES, clock=quiet_clock, load=QuietLoad())
    assert quiet.v(16) == pytest.approx(XEON.v[16]) and quiet.busy is False


@pytest.mark.parametrize("hiccup", [0.6, 1.6])
def test_one_hiccup_in_a_timing_does_not_move_a_batch_cost(hiccup):
    """The first batch of 64 runs 40% fast or 60% slow (a shared machine's hiccup): a median of two would
    move v(64) by half of that, so a size whose timings disagree is timed again until two agree."""
    clock = Clock()
    seen = []

    def cost(n):
        seen.append(n)
        return XEON.batch(n) * (hiccup if n == 64 and seen.count(64) == 1 else 1.0)

    target = TimedModel(FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=512), clock, cost)
    costs = measure(target, None, list(range(2, 40)), SIZES, clock=clock, load=QuietLoad())
    assert costs.v(64) == pytest.approx(XEON.v[64])
    assert seen.count(64) == 3 and seen.count(16) == 2  # only the size that disagreed was timed again


def test_a_load_that_grows_while_measuring_leaves_the_ratios_alone():
    """The machine slows down steadily while it measures (a neighbour's build ramping up), to 5x by the end:
    each batch is divided by the single step timed just before it, not by singles from other moments, so
    every v(n) holds (dividing by the measurement's first single step passed every test before this one)."""
    clock = Clock()
    target = TimedModel(
        FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=512), clock, lambda n: XEON.batch(n) * (1 + clock.t / 50)
    )
    costs = measure(target, None, list(range(2, 40)), SIZES, clock=clock, load=QuietLoad())
    assert clock.t > 200 and costs.busy  # the single steps disagree: not saved
    for n in SIZES:
        assert costs.v(n) == pytest.approx(XEON.v[n], rel=0.05), n


def test_a_calibration_under_load_is_not_timed_again_to_settle():
    """On a busy machine timings rarely agree, and retiming every size until two do doubled a first run's
    calibration beside other work (87 s; 42 s without the retiming) for a result that is never saved."""
    seen = []

    def measured(load, noise):
        clock = Clock()
        seen.clear()

        def cost(n):
            seen.append(n)
            return XEON.batch(n) * (1.0 + noise * (len(seen) % 3))  # timings that never agree

        target = TimedModel(FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=512), clock, cost)
        return measure(target, None, list(range(2, 40)), SIZES, clock=clock, load=load)

    assert measured(BusyLoad(), 0.3).busy
    assert max(seen.count(n) for n in SIZES if n > 1) == 2  # the two repeats asked for, no more
    measured(QuietLoad(), 0.3)
    assert max(seen.count(n) for n in SIZES if n > 1) > 2  # quiet: timed again until two agree


def test_busy_or_stale_calibrations_are_measured_again(tmp_path, monkeypatch):
    """A first run under load is used for that run only; the next run measures again and saves; a run
    whose step time drifted marks the saved calibration stale, so the run after measures again."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    measured = []

    def fake_calibrate(target, draft, key, *, full=False, threads=0):
        busy = not measured  # the first measurement happens under load
        measured.append(busy)
        return tuning.Tuning(key, Costs(dict(XEON.v), 0.45, 0.04, 0.04, busy=busy))

    monkeypatch.setattr(tunemeasure, "calibrate", fake_calibrate)
    notes = []
    first = tunemeasure.prepare(None, None, "k1", use_saved=True, notify=notes.append)
    assert first.costs.busy and tuning.load("k1") is None and any("other programs" in n for n in notes)
    notes.clear()
    second = tunemeasure.prepare(None, None, "k1", use_saved=True, notify=notes.append)
    assert not second.costs.busy and tuning.trusted(tuning.load("k1"))
    # measured again after a busy run: "(once; ...)" was false on every run while the CPUs stayed busy
    assert "(none saved yet; `specchat tune` refines)" in notes[0] and "once" not in notes[0]
    assert tunemeasure.prepare(None, None, "k1", use_saved=True, notify=notes.append).costs.busy is False
    assert len(measured) == 2  # the trusted one was reused
    saved = tuning.load("k1")
    saved.priors = {"spec": 0.71}  # measured by `specchat tune`
    tuningsave.save(saved)
    tuningsave.mark_stale(second)
    assert not tuning.trusted(tuning.load("k1"))
    again = tunemeasure.prepare(None, None, "k1", use_saved=True, notify=notes.append)
    assert len(measured) == 3 and tuning.trusted(tuning.load("k1"))
    assert again.priors == tuning.load("k1").priors == {"spec": 0.71}  # costs measured again, priors kept


def test_no_tuning_says_its_measurement_is_not_saved(tmp_path, monkeypatch):
    """--no-tuning measures on every run and saves nothing: its note said "(once; ...)", as if it were kept."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    costs = Costs(dict(XEON.v), 0.45, 0.04, 0.04)
    monkeypatch.setattr(tunemeasure, "calibrate", lambda target, draft, key, **_: tuning.Tuning(key, costs))
    notes = []
    tunemeasure.prepare(None, None, "k1", use_saved=False, notify=notes.append)
    assert tuning.load("k1") is None
    assert "(--no-tuning: for this run only, not saved)" in notes[0] and "once" not in notes[0]
    tunemeasure.prepare(None, None, "k1", use_saved=True, notify=notes.append)
    assert "(none saved yet; `specchat tune` refines)" in notes[-1]


@pytest.mark.parametrize(
    "content",
    ["[]", '"abc"', '{"version": 4, "v": {}}', '{"version": 4, "v": {"1": 0}, "step_s": 1}', "{", "null"],
)
def test_an_odd_saved_tuning_is_ignored(tmp_path, monkeypatch, content):
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    path = tuning.tuning_path("odd")
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert tuning.load("odd") is None


def test_a_saved_tuning_whose_single_step_is_not_one_is_read_as_ratios(tmp_path, monkeypatch):
    """Costs are in target steps, so v(1) is 1; a hand-edited file with v(1) = 3 was taken as it was, and the
    target alone counted as a third of itself (drafting undervalued) until the next start found it stale."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    path = tuning.tuning_path("edited")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": tuning.VERSION, "v": {"1": 3, "2": 4.5, "16": 24}, "step_s": 0.03}))
    costs = tuning.load("edited").costs
    assert costs.v(1) == 1.0 and costs.v(2) == pytest.approx(1.5) and costs.v(16) == pytest.approx(8.0)
    path.write_text(json.dumps({"version": tuning.VERSION, "v": {"1": 1e-300, "2": 1e10}, "step_s": 0.03}))
    assert tuning.load("edited") is None  # a ratio past any float: odd, measured again


def test_cpu_load_sees_another_process_using_the_cpus():
    """What marks a calibration busy on Linux: CPU time of OTHER processes while it ran."""
    import subprocess
    import sys
    import time

    from specchat.costmeasure import CpuLoad

    if CpuLoad().other_share() is None:
        pytest.skip("no /proc here")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        load = CpuLoad()
        time.sleep(1.0)
        assert load.busy() and load.other_share() > 0.4
    finally:
        for hog in hogs:
            hog.kill()


@dataclass
class CandidDraft(DraftLM):
    """A DraftLM that is sure of its right guesses and, if `candid`, unsure of its wrong ones (a real
    draft model's own probability tracks how often the target agrees: benchmarks/record_traces.py)."""

    candid: bool = True

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        row = super().__call__(context)
        agrees = self.agree(self, context)
        if agrees or not self.candid:
            row[int(np.argmax(row))] += 8.0  # about 0.99
        return row  # a wrong guess only 1.0 above the rest: about 0.1


def test_auto_does_not_verify_guesses_the_draft_model_is_unsure_of():
    """A desktop CPU: a verify slot costs a tenth of a step, a draft step a fifth. A wrong guess the draft
    model doubted ends the draft before more steps and slots go after it; one it was sure of cannot be
    told apart. Same guesses, same right and wrong ones."""
    desktop = Machine({n: 1 + 0.1 * (n - 1) for n in SIZES}, 0.2)
    runs = {}
    for candid in (True, False):
        clock = Clock()
        target_fn = HashLM(n_vocab=V)
        target = TimedModel(FakeModel(target_fn, n_vocab=V, n_ctx=2048), clock, desktop.batch)
        draft_fn = CandidDraft(target_fn, agree_hashed(0.8), candid=candid)
        draft = TimedModel(FakeModel(draft_fn, n_vocab=V, n_ctx=2048), clock, lambda m: desktop.c * desktop.batch(m))
        drafter = AutoDrafter(desktop.costs(), [DraftModelDrafter(draft)], clock=clock)
        _, stats = speculative_decode(
            CachedModel(target), drafter, [5, 6, 7, 8], Sampler(SamplingParams()), k=64, max_tokens=160, clock=clock
        )
        runs[candid] = stats
    candid, blind = runs[True], runs[False]
    assert candid.drafted - candid.accepted < 0.5 * (blind.drafted - blind.accepted)
    assert candid.decode_s < blind.decode_s


def test_a_round_verified_without_a_draft_is_the_target_alones():
    """The loop verifies a reply's last token without asking auto for a draft: that round must not be
    booked as the draft model's, with the round before's drafting time (a false loss for the guard)."""
    clock = Clock()
    target_fn = HashLM(n_vocab=V)
    target = TimedModel(FakeModel(target_fn, n_vocab=V, n_ctx=2048), clock, GPU.batch)
    draft = TimedModel(
        FakeModel(DraftLM(target_fn, agree_hashed(0.9)), n_vocab=V, n_ctx=2048), clock, lambda m: GPU.c * GPU.batch(m)
    )
    auto = AutoDrafter(GPU.costs(), [DraftModelDrafter(draft), NgramDrafter()], clock=clock)
    booked, proposals = [], []
    propose = auto.propose
    auto.propose = lambda context, k, sampler: (proposals.append(k), propose(context, k, sampler))[1]
    for n in range(20, 40):  # some reply length ends with a round that drafts nothing
        booked.clear(), proposals.clear()
        auto.reset()  # a new guard: watch its verdicts
        record = auto.guard.record
        auto.guard.record = lambda source, *args, record=record: (booked.append(source), record(source, *args))
        _, stats = speculative_decode(
            CachedModel(target),
            auto,
            [5, 6, 7, 8, 9, 10, 11, 12],
            Sampler(SamplingParams()),
            k=64,
            max_tokens=n,
            clock=clock,
        )
        if stats.rounds > len(proposals):
            break
    assert stats.rounds == len(proposals) + 1 and booked[-2] == "spec"
    assert booked[-1] == "target"


def test_measuring_a_draft_that_lacks_some_target_tokens():
    """The draft reads a stand-in for a target token beyond its vocabulary (as DraftModelDrafter does): the
    bench's cost model, taken after its first prompt, sent such a token to the draft's decode."""
    context = list(range(2, 40))  # ids 32..39: the target's only
    target = FakeModel(HashLM(n_vocab=40), n_vocab=40, n_ctx=512)
    draft = FakeModel(HashLM(n_vocab=32), n_vocab=32, n_ctx=512)
    costs = measure(target, draft, context, (1, 2, 8), clock=Clock(), load=QuietLoad())
    assert costs.draft_step is not None and draft.calls and all(max(call.tokens) < 32 for call in draft.calls)


@pytest.mark.parametrize("load", [QuietLoad, BusyLoad])
def test_a_run_whose_step_time_drifted_marks_the_saved_calibration_stale(fake_models, seed_tuning, monkeypatch, load):
    """The saved calibration says a target step takes 1,000 s; the fake's steps take microseconds. A short
    reply (under DRIFT_ROUNDS rounds) is no evidence yet; once enough rounds ran at another speed, the
    pipeline marks the saved calibration stale, so the next start measures again (runtime._check_drift:
    removing it failed no test). Not where other programs kept the CPUs busy during the reply (a second
    terminal's reply): that slowed it, not the machine, and a quiet calibration was marked stale by every
    reply made beside another, while the measurement it sent the next start to take, under load, is not saved."""
    from specchat import costmeasure
    from specchat.chat import Message
    from specchat.runtime import Options, open_pipeline

    monkeypatch.setattr(costmeasure, "CpuLoad", load)
    target, draft = fake_models
    seed_tuning(target, draft, Costs({1: 1.0}, 5.0, 1e3, 1e3))  # only single steps: the target alone every round
    options = Options(target_path=target, draft_path=draft, mode="auto")
    with open_pipeline(options, lambda _message: None) as pipeline:
        prompt = pipeline.prompt([Message("user", "copy this line of text back to me, please, word for word")])
        assert pipeline.tuning.source == "calibration" and not pipeline.tuning.stale

        def reply(n: int):
            return pipeline.generate(prompt, SamplingParams(), mode="auto", k=64, max_tokens=n)

        assert reply(16).stats.rounds < 32
        assert not tuning.load(pipeline.tuning.key).stale
        reply(48)
        assert tuning.load(pipeline.tuning.key).stale is (load is QuietLoad)


class LoadsInTurn:
    """Busy during the first reply, quiet after it: each reply reads the load once (runtime.generate)."""

    turns: ClassVar[list[bool]] = []

    def busy(self) -> bool:
        return self.turns.pop(0) if self.turns else False


def test_a_busy_replys_step_times_do_not_judge_the_quiet_reply_after_it(fake_models, seed_tuning, monkeypatch):
    """The drift window runs across replies: a busy reply of 48 rounds, rightly not judged, filled it with its
    step times, and a quiet reply of 16 rounds after it (no evidence on its own) marked the calibration stale."""
    from specchat import costmeasure
    from specchat.chat import Message
    from specchat.runtime import Options, open_pipeline

    monkeypatch.setattr(costmeasure, "CpuLoad", LoadsInTurn)
    monkeypatch.setattr(LoadsInTurn, "turns", [True])
    target, draft = fake_models
    seed_tuning(target, draft, Costs({1: 1.0}, 5.0, 1e3, 1e3))
    with open_pipeline(Options(target_path=target, draft_path=draft, mode="auto"), lambda _message: None) as pipeline:
        prompt = pipeline.prompt([Message("user", "copy this line of text back to me, please, word for word")])
        for n in (48, 16):
            pipeline.generate(prompt, SamplingParams(), mode="auto", k=64, max_tokens=n)
            assert not tuning.load(pipeline.tuning.key).stale


def test_the_draft_models_acceptance_is_judged_cautiously():
    """Before any evidence the draft model's acceptance is its prior, 0.6, on a weight of 4 rounds. Where
    drafting pays at 0.6 but not a little below it, auto runs the target alone: it decides on the cautious
    estimate, below the mean, and only the mean ranks (setting CAUTION to 0 failed no test)."""
    spec = DraftModelDrafter(FakeModel(DraftLM(HashLM(n_vocab=V)), n_vocab=V, n_ctx=64))
    offer = spec.offer([5], 64)
    assert offer.rates[0] < offer.mean[0] < offer.upper[0] and offer.mean[0] == pytest.approx(0.6)
    costs = Costs({1: 1.0, 2: 1.45}, 0.1, 1.0, 1.0)  # one guess: 1.6 tokens for 1.55 steps at the mean
    assert costs.speedup(offer.mean, 0.1)[1] > 1.0 > costs.speedup(offer.rates, 0.1)[1]
    auto = AutoDrafter(costs, [spec])
    auto.budget.spent = 1e9  # no trials: the choice on the estimates alone
    assert auto.choose([5], 64).source == "target"
    sure = AutoDrafter(Costs({1: 1.0, 2: 1.3}, 0.1, 1.0, 1.0), [spec])  # where even the cautious one pays
    assert sure.choose([5], 64).source == "spec"


class ModelOffer(FixedOffer):
    """A draft model that offers the same estimates every round, as long as it is asked for."""

    name, uses_model = "spec", True

    def offer(self, context, k_max: int) -> Offer:
        self.asked = k_max
        n = min(k_max, len(self.fixed.rates))
        return Offer(self.fixed.rates[:n], self.fixed.upper[:n], mean=self.fixed.rates[:n])

    def prefill(self, context) -> None:
        pass


def test_auto_asks_the_draft_model_for_16_guesses_at_most():
    """On a GPU, with guesses that nearly always hold, 63 would pay most; the draft model stays at 16 or less
    (its steps cost each, and docs/modes.md promises it). Passing auto's k = 64 on failed no test."""
    sure = ModelOffer(Offer([0.99] * 64, [0.99] * 64))
    choice = AutoDrafter(Machine({n: 1.0 for n in range(1, 66)}, 0.01).costs(), [sure]).choose([1, 2, 3], 64)
    assert sure.asked == 16 and (choice.source, choice.k) == ("spec", 16)


def test_a_reply_after_one_that_overspent_earns_its_trials_from_its_own_time():
    """The next reply starts from what the last left unspent, never from a debt: a trial that cost far more than
    allowed does not leave the replies after it without exploration (carrying the debt over failed here)."""
    maybe = ModelOffer(Offer([0.0] * 4, [0.9] * 4))  # pays only optimistically: a trial
    auto = AutoDrafter(GPU.costs(), [maybe])
    assert auto.choose([1, 2, 3], 64).explore
    auto.budget.spent = 1e9  # this reply's trials cost all it could afford, and more
    assert auto.choose([1, 2, 3], 64).source == "target"
    auto.prefill([1, 2, 3])  # the next reply: nothing carried over, so no trial before it earned one
    assert auto.choose([1, 2, 3], 64).source == "target"
    auto.budget.elapsed = 100  # 100 target steps into it: 3 earned
    assert auto.choose([1, 2, 3], 64).explore
    auto.reset()  # a new session (bench's every run): a first reply's start again
    assert auto.choose([1, 2, 3], 64).explore


class BrokenCopies(Drafter):
    """A lookup whose copies might hold (optimistically) and never do: the prompt lookup of an editor's file full of
    near-repeats, where each /infill completion tries it again after its short pause (LOOKUP_ASIDE_ROUNDS)."""

    name, uses_model = "ngram", False

    def offer(self, context, k_max: int) -> Offer:
        return Offer([0.0] * 4, [0.9] * 4)

    def propose(self, context, k: int, sampler) -> Draft:
        return Draft([context[-1]] * k, [None] * k, source="ngram")


def test_a_session_of_short_replies_pays_trials_from_its_share_not_a_step_per_reply():
    """serve's /infill: an editor's completions of 20 tokens, one after another through one drafter, on a CPU where a
    trial of 3 costs a step. Each reply had a fresh step to try with: 6.5% over the session here (852 vs 800 steps);
    now trials cost EXPLORE_SHARE of its time and one step (a round over at most)."""
    clock = Clock()
    target = CachedModel(TimedModel(FakeModel(HashLM(n_vocab=V), n_vocab=V, n_ctx=4096), clock, XEON.batch))
    auto = AutoDrafter(XEON.costs(), [BrokenCopies()], clock=clock)
    seconds = {"alone": 0.0, "auto": 0.0}
    tried = 0
    for reply in range(40):
        prompt = [5, 6, 7, 8, 9, 10, 11, 12 + reply]
        for name, drafter in (("alone", None), ("auto", auto)):
            sampler = Sampler(SamplingParams())
            _, stats = speculative_decode(target, drafter, prompt, sampler, k=64, max_tokens=20, clock=clock)
            seconds[name] += stats.decode_s
            tried += stats.rounds_by_source.get("ngram", 0)
    assert tried >= 1
    assert seconds["auto"] <= (1 + EXPLORE_SHARE) * seconds["alone"] + 2.0, (seconds, tried)


def test_a_round_timed_as_no_time_at_all_does_not_stop_the_guard():
    """A drafter back from being set aside whose round the clock saw as taking 0 s (an injected clock's glitch):
    judging whether it is trusted again divided by its seconds per token and raised ZeroDivisionError."""
    guard = Guard()
    guard.record("target", 1, 1.0, 1.0)
    for _ in range(3):
        guard.record("ngram", 1, 2.0, 1.0)
    guard.round += 16
    guard.record("ngram", 1, 0.0, 1.0)
    assert guard.trusted("ngram")


def test_the_draft_model_starts_from_the_acceptance_tune_measured(fake_models, isolated):
    """Before any round the draft model's acceptance is the one `tune` saved for this machine and pair, not the
    fixed 0.6 (replacing the prior with 0.6 failed no test)."""
    from specchat import tuning as tuning_module
    from specchat import tuningsave
    from specchat.runtime import Options, Resolved, open_pipeline

    target, draft = fake_models
    costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in tunemeasure.QUICK_BATCHES}, 0.05, 1e-3, 1e-3)
    options = Options(target_path=target, draft_path=draft, mode="auto")
    key = tuning_module.key_for(Resolved(None, target, draft), options)
    tuningsave.save(tuning_module.Tuning(key, costs, priors={"spec": 0.9}, source="tune"))
    with open_pipeline(options, lambda _message: None) as pipeline:
        assert pipeline.drafters["spec"].offer([5], 16).mean[0] == pytest.approx(0.9)


def test_a_calibration_does_not_replace_a_tuning_another_process_saved_while_it_measured(tmp_path, monkeypatch):
    """A first auto run read no tuning, measured, and saved its quick calibration over whatever was saved
    meanwhile: a `tune` that ended in those seconds lost its full batches and its measured acceptance."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    tuned = tuning.Tuning("k1", Costs(dict(XEON.v), 0.4, 0.05, 0.05), priors={"spec": 0.8}, source="tune")

    def fake_calibrate(target, draft, key, *, full=False, threads=0):
        tuningsave.save(tuned)  # the other process's tune ends while this run measures
        return tuning.Tuning(key, Costs(dict(XEON.v), 0.45, 0.04, 0.04))

    monkeypatch.setattr(tunemeasure, "calibrate", fake_calibrate)
    used = tunemeasure.prepare(None, None, "k1", use_saved=True, notify=lambda _message: None)
    assert used.costs.draft_step == 0.45  # this run goes on with what it measured
    saved = tuning.load("k1")
    assert saved.source == "tune" and saved.priors == {"spec": 0.8} and saved.costs.draft_step == 0.4


def test_a_calibration_keeps_the_acceptance_a_tune_under_load_saved_while_it_measured(tmp_path, monkeypatch):
    """A `tune` that ended under load saves its measured acceptance beside costs it does not trust; the run's
    quiet calibration then replaces those costs, and kept the acceptance it had read before measuring (none)."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    busy = tuning.Tuning("k1", Costs(dict(XEON.v), 0.4, 0.05, 0.05, busy=True), priors={"spec": 0.8}, source="tune")

    def fake_calibrate(target, draft, key, *, full=False, threads=0):
        tuningsave.save(busy)
        return tuning.Tuning(key, Costs(dict(XEON.v), 0.45, 0.04, 0.04))

    monkeypatch.setattr(tunemeasure, "calibrate", fake_calibrate)
    tunemeasure.prepare(None, None, "k1", use_saved=True, notify=lambda _message: None)
    saved = tuning.load("k1")
    assert saved.costs.draft_step == 0.45 and not saved.costs.busy and saved.priors == {"spec": 0.8}


def gpu_auto(clock: Clock, lookup: bool = True):
    """The target and auto with a draft model that agrees 90% of the time (and prompt lookup), on a GPU's costs."""
    target_fn = HashLM(n_vocab=V)
    target = CachedModel(TimedModel(FakeModel(target_fn, n_vocab=V, n_ctx=2048), clock, GPU.batch))
    draft_model = FakeModel(DraftLM(target_fn, agree_hashed(0.9)), n_vocab=V, n_ctx=2048)
    draft = TimedModel(draft_model, clock, lambda m: GPU.c * GPU.batch(m))
    arms = [DraftModelDrafter(draft), *([NgramDrafter()] if lookup else [])]
    return target, AutoDrafter(GPU.costs(), arms, clock=clock), draft_model


def test_a_draft_model_first_read_after_the_first_token_is_drafting_not_prefill(monkeypatch):
    """Where auto first chooses a draft model that warm left unread, its reading of the prompt is time the
    user waits between tokens: drafting's, as when warm reads it (Draft.prefill_s is for a reading before
    the first token)."""
    clock = Clock()
    _, auto, draft_model = gpu_auto(clock, lookup=False)
    monkeypatch.setattr(auto, "_pays_alone", lambda drafter, context: False)  # warm leaves it unread
    prompt = [3 + i % (V - 3) for i in range(100)]
    auto.prefill(prompt[:-1])
    auto.warm(prompt)
    assert draft_model.calls == []
    draft = auto.propose(prompt, 8, Sampler(SamplingParams()))
    assert draft.source == "spec" and draft_model.calls  # chosen, so read now
    assert draft.prefill_s == 0.0


def test_each_reply_s_reading_before_its_first_token_is_prefill_again():
    """The second reply of a conversation starts cold again: where auto has the draft model draft its first
    round, its reading of what it has not seen is the second reply's prefill, as it was the first's."""
    clock = Clock()
    target, auto, _ = gpu_auto(clock, lookup=False)
    first = [3 + i % (V - 3) for i in range(12)]
    reply, stats = speculative_decode(target, auto, first, Sampler(SamplingParams()), k=16, max_tokens=8, clock=clock)
    second = [*first, *reply, *range(20, 30)]
    _, again = speculative_decode(target, auto, second, Sampler(SamplingParams()), k=16, max_tokens=8, clock=clock)
    assert stats.rounds_by_source["spec"] and again.rounds_by_source["spec"]  # the draft model drafted in both
    # The target's prefill of the new tokens, and the draft model's reading, at least one step of it (c).
    assert again.prefill_s >= GPU.batch(len(second) - len(first) - len(reply)) + GPU.c


def warmed(costs: Costs, prompt_len: int, set_aside: bool = False, k: int = 64) -> bool:
    """Whether auto (drafting up to k) has its draft model read a prompt of prompt_len tokens once the first token
    is out."""
    clock = Clock()
    _, auto, draft_model = gpu_auto(clock, lookup=False)
    auto.costs = costs
    if set_aside:
        auto.guard.times_aside["spec"] = 1
    prompt = [3 + i % (V - 3) for i in range(prompt_len)]
    auto.prefill(prompt[:-1])
    auto.propose(prompt, k, Sampler(SamplingParams()))  # the first round, as the loop asks for it
    assert not draft_model.calls
    auto.warm(prompt)
    return bool(draft_model.calls)


def test_the_reading_a_draft_model_would_need_is_weighed_before_it_reads():
    """A draft model that pays on its own reads the prompt once the first token is out; not where only a free
    reading would make it pay (a long prompt on a CPU whose batches cost little up to 8 but much beyond: its
    share of the reading outweighs what drafting gains), nor where the guard set it aside."""
    flat = Costs({1: 1.0, 2: 1.02, 4: 1.04, 8: 1.1, 16: 3.0, 64: 40.0, 2048: 1300.0}, 0.1, 1.0, 1.0)
    assert warmed(flat, 40)
    assert not warmed(flat, 1500)  # 0.1 x v(1499) / 16: some 6 steps a round
    assert not warmed(flat, 40, set_aside=True)


def test_a_reading_only_longer_drafts_would_repay_waits_where_the_run_drafts_one_token():
    """`-k 1`: a batch of 2 costs 1.5 steps here, so one guess never repays the reading that longer drafts do."""
    steep_then_flat = Costs({1: 1.0, 2: 1.5, 4: 1.55, 8: 1.6, 16: 3.0, 64: 40.0}, 0.1, 1.0, 1.0)
    assert warmed(steep_then_flat, 40)
    assert not warmed(steep_then_flat, 40, k=1)
