"""What a batch costs deep into a long text, learned from the rounds (costexcess): the fit, and auto's choice on it."""

from __future__ import annotations

import math

import pytest
from fakes import Clock, FakeModel, HashLM, greedy_next, hash_row

from specchat.costmodel import DRIFT_CONTEXT, Costs
from specchat.drafters.auto import AutoDrafter
from specchat.drafters.base import Draft, Drafter, Offer
from specchat.models_api import CachedModel
from specchat.sampling import Sampler, SamplingParams
from specchat.speculative import speculative_decode

# An Intel Xeon's calibration (target steps; 1 step = 1 s) after 300 tokens. The same sizes timed 8,000 tokens into
# a text fit seconds = 1.0 v(n) + 0.49 n there (docs/bench.md, "Batches deep into a long text").
XEON = {1: 1.0, 2: 1.43, 4: 1.59, 8: 2.92, 16: 3.62, 32: 6.13}
DEEP = DRIFT_CONTEXT + 1000
SIZES = (1, 2, 4, 8, 16, 1, 32, 4, 1, 16, 2, 8)  # a mix of rounds, as auto drafts them


def calibrated() -> Costs:
    return Costs(dict(XEON), 0.5, 1.0, 1.0)


def wobble(i: int) -> float:
    """A shared VM's timing noise: a few percent either way, reproducible."""
    return 1.0 + 0.04 * float(hash_row((i,), 1)[0])


def test_deep_rounds_teach_what_batches_cost_there():
    costs = calibrated()
    for i, n in enumerate(SIZES * 3):
        costs.observe_verify(n, (XEON[n] + 0.49 * n) * wobble(i), DEEP)
    truth = (XEON[16] + 0.49 * 16) / 1.49  # 7.7 single steps, as measured at 8,000 tokens
    assert costs.v(16) == pytest.approx(truth, rel=0.12)
    assert costs.v(1) == pytest.approx(1.0)
    assert costs.calibrated_v(16) == XEON[16]  # the calibration itself is kept, and shown (ceilings)
    assert costs.ceilings() == calibrated().ceilings()


def test_a_load_that_slows_every_size_alike_moves_no_ratio():
    """A compiler beside the run: every round 1.8x slower, batches no dearer than single steps."""
    costs = calibrated()
    for i, n in enumerate(SIZES * 3):
        costs.observe_verify(n, 1.8 * XEON[n] * wobble(i), DEEP)
    assert costs.v(16) == pytest.approx(XEON[16], rel=0.03)


def test_copies_drafted_round_after_round_teach_it_too_anchored_at_the_calibrated_step():
    """No single step timed among them: rounds of one size alone cannot tell how cost grows with size."""
    costs = calibrated()
    for i in range(8):
        costs.observe_verify(16, (XEON[16] + 0.49 * 16) * wobble(i), DEEP)
    assert costs.v(16) == pytest.approx((XEON[16] + 0.49 * 16) / 1.49, rel=0.12)


def test_without_rounds_of_different_sizes_the_calibration_stands():
    costs = calibrated()
    for i in range(40):  # the target alone, deep into a text that slows it by 40%
        costs.observe_verify(1, 1.4 * wobble(i), DEEP)
    assert costs.v(16) == XEON[16]


def test_an_absurd_saved_ratio_leaves_the_calibration_as_it_is_not_nan():
    """A hand-edited tuning's v(16) of 1e-300 (positive and finite, so it loads) overflowed the fit's sums into NaN,
    and every cost and the step time after it with them."""
    costs = Costs({**XEON, 16: 1e-300}, 0.5, 1.0, 1.0)
    for i, n in enumerate(SIZES * 3):
        costs.observe_verify(n, (XEON[n] + 0.49 * n) * wobble(i), DEEP)
    assert costs.excess.share == 0.0
    assert costs.v(16) == 1e-300 and math.isfinite(costs.step_s)  # absurd as the file says, as before the fit


def test_near_the_start_of_a_text_the_calibration_holds_and_the_deep_fit_is_dropped():
    """A calibration is taken after a short text: there it is the truth (and the busy simulator's noisy sizes
    must not be 'corrected' into one excess for all). A short reply after a deep one starts from it again."""
    costs = calibrated()
    for i, n in enumerate(SIZES * 3):
        costs.observe_verify(n, (XEON[n] + 0.49 * n) * wobble(i), DRIFT_CONTEXT)
    assert costs.v(16) == XEON[16]
    for i, n in enumerate(SIZES * 3):
        costs.observe_verify(n, (XEON[n] + 0.49 * n) * wobble(i), DEEP)
    assert costs.v(16) > 1.5 * XEON[16]
    costs.observe_verify(1, 1.0, 300)
    assert costs.v(16) == XEON[16]


class DeepTarget(FakeModel):
    """A target deep into a text: a batch of n costs v(n) + EXTRA n seconds (each token reads the long cache)."""

    EXTRA = 0.2

    def __init__(self, clock: Clock) -> None:
        super().__init__(HashLM(n_vocab=64), n_vocab=64, n_ctx=4096)
        self.clock = clock

    def eval(self, tokens, n_logits):
        self.clock.t += calibrated().calibrated_v(len(tokens)) + self.EXTRA * len(tokens)
        return super().eval(tokens, n_logits)


class Copies(Drafter):
    """A lookup whose copies hold for 90% of tokens and say so: the target's own tokens, about every tenth wrong."""

    name, uses_model = "ngram", False

    def __init__(self, target: HashLM) -> None:
        self.target = target

    def offer(self, context, k_max: int) -> Offer:
        return Offer([0.9] * min(k_max, 15), [0.9] * min(k_max, 15), mean=[0.9] * min(k_max, 15))

    def propose(self, context, k: int, sampler) -> Draft:
        tokens = list(context)
        for _ in range(k):
            right = greedy_next(self.target, tokens)
            wrong = hash_row(tuple(tokens[-4:]), 1, 3)[0] < -1.28  # about 10% of positions
            tokens.append((right + 1) % 64 if wrong else right)
        return Draft(tokens[len(context) :], [None] * k, source="ngram")


def decode_s(drafter, k: int) -> float:
    clock = Clock()
    target = DeepTarget(clock)
    prompt = [2 + (i * 7919) % 62 for i in range(DEEP)]
    _, stats = speculative_decode(
        CachedModel(target), drafter, prompt, Sampler(SamplingParams()), k=k, max_tokens=384, clock=clock
    )
    return stats.decode_s


def test_deep_into_a_text_auto_drafts_as_long_as_pays_there_not_as_the_calibration_says():
    """Calibrated (after a short text), copies of 15 tokens pay most (2.25x on the model); 2,000 tokens in, where
    every token of a batch costs 0.2 steps more, a batch of 16 costs 5.7 steps and 3 tokens pay most (fixed 3: 260 s,
    fixed 15: 287 s). auto learns that from its own rounds: 262 s. Without the fit it kept drafting 15 (283 s)."""
    copies = Copies(HashLM(n_vocab=64))
    best_fixed = min(decode_s(copies, k) for k in (1, 3, 7, 15))
    auto = AutoDrafter(calibrated(), [copies], clock=lambda: 0.0)  # its own clock times drafting only: free here
    assert decode_s(auto, 64) <= 1.05 * best_fixed
