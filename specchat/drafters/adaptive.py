"""Choosing, every round, whether and how much to draft: the draft length that maximises expected
tokens per second, where "no draft" (k = 0, the target alone) is always a candidate.

Expected tokens of a k-token draft: E = 1 + sum_i prod_{j<=i} a_j, with a_j the estimated acceptance
of position j given the previous ones were accepted. For the draft model a_j is learned per position
(with an optimistic bonus that shrinks as evidence grows, so an untried strategy gets a few chances and
no more); for a copy (prompt lookup) it is the chance that a copy which has matched L tokens so far
holds for one more, learned from every copy on offer. Time: k draft steps + one verify batch of k + 1
tokens, from measured costs updated online; only measured batch sizes are candidates.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..sampling import Sampler
from .base import Draft
from .model import DraftModelDrafter
from .ngram import NgramDrafter

MAX_K = 64  # longest copy (63 tokens in a batch of 64): long batches cost far less per token than short ones
MODEL_MAX_K = 16  # longest draft-model draft: each of its tokens costs a draft step
FIRST_COPY_CAP = 7  # longest copy (a batch of 8) before this reply has shown that it copies long runs
COPY_CAP_GROWTH = 2  # later copies may be this many times the longest run copied so far
EMA = 0.2  # weight of a new timing observation
# Prior chance that a copy holds for one more token, by how many tokens it has matched so far (bucket:
# the largest key <= the length). Measured on whole-file edits and free-form replies that are not in the
# built-in suite: a copy that has matched 9+ tokens is the reply copying its input and goes on 95-99%
# of the time; a 1-token match holds one time in six, a 2-token match half the time. Learned online
# from there (benchmarks/copy_odds.py measures them again).
COPY_PRIORS = {1: 0.15, 2: 0.5, 3: 0.7, 5: 0.85, 9: 0.95, 17: 0.97, 33: 0.98, 65: 0.98}
COPY_PRIOR_WEIGHT = 12.0  # in observed tokens: the priors come from data, a few tokens do not undo them
COPY_CAUTION = 1.0  # standard errors below the mean: a copy not drafted is still learned from


def _bucket(length: int) -> int:
    return max(b for b in COPY_PRIORS if b <= max(1, length))


@dataclass
class Costs:
    """Seconds per verify batch of n tokens and per draft-model step, measured and kept current."""

    verify: dict[int, float]
    draft_step: float | None = None
    ngram_step: float = 2e-5

    def verify_time(self, n: int) -> float:
        known = sorted(self.verify)
        if n in self.verify:
            return self.verify[n]
        below = [m for m in known if m < n]
        above = [m for m in known if m > n]
        if below and above:  # linear interpolation between the nearest measurements
            lo, hi = below[-1], above[0]
            return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (n - lo) / (hi - lo)
        if below:  # beyond the largest measurement: per-token cost of the last one
            last = below[-1]
            return self.verify[last] * n / last
        return self.verify[above[0]]

    def observe_verify(self, n: int, seconds: float) -> None:
        """Keep measured sizes current. A size never measured (a draft cut short) is not added: one
        noisy timing would make it a candidate that the calibration never vetted."""
        old = self.verify.get(n)
        if old is not None:
            self.verify[n] = (1 - EMA) * old + EMA * seconds

    def observe_draft(self, steps: int, seconds: float) -> None:
        if steps <= 0:
            return
        per_step = seconds / steps
        self.draft_step = per_step if self.draft_step is None else (1 - EMA) * self.draft_step + EMA * per_step


@dataclass
class Acceptance:
    """Per-position acceptance counts of one strategy (an "arm"), with a Beta prior."""

    prior: float = 0.5
    strength: float = 2.0
    tried: list[int] = field(default_factory=lambda: [0] * MAX_K)
    accepted: list[int] = field(default_factory=lambda: [0] * MAX_K)

    def observe(self, drafted: int, accepted: int) -> None:
        # Conditional counts: position i is tried only when positions before it were all accepted.
        for i in range(min(drafted, accepted + 1, MAX_K)):
            self.tried[i] += 1
            self.accepted[i] += i < accepted

    def rates(self, k: int, optimism: float) -> list[float]:
        """Conditional acceptance a_i for positions 1..k (optimistic upper estimate)."""
        out = []
        for i in range(k):
            # Position i is tried only when position i-1 was accepted: counts are conditional already.
            n = self.tried[i] + self.strength
            mean = (self.accepted[i] + self.prior * self.strength) / n
            bonus = optimism * math.sqrt(mean * (1 - mean) / n)
            out.append(min(1.0, mean + bonus))
        return out


@dataclass
class CopyOdds:
    """The chance that a copy holds for one more token, by how many tokens it has matched by then.

    Shared by every position of every copy, so a few offers teach it. Every copy on offer is checked
    token by token against what the target produced (drafted or not), so prompt lookup needs no
    exploration: the estimate is a cautious one (a standard error below the mean), since a wrong long
    copy costs a whole verify batch while a copy passed over costs only its gain.
    """

    tried: dict[int, int] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)
    _table: dict[int, float] | None = field(default=None, repr=False)

    def rate(self, length: int) -> float:
        if self._table is None:
            self._table = self._estimate()
        return self._table[_bucket(length)]

    def observe(self, length: int, held: bool) -> None:
        bucket = _bucket(length)
        self.tried[bucket] = self.tried.get(bucket, 0) + 1
        self.held[bucket] = self.held.get(bucket, 0) + held
        self._table = None

    def _estimate(self) -> dict[int, float]:
        """Posterior means per bucket, made non-decreasing in the match length by pooling neighbours
        that disagree (a longer match is never less of a copy): one early break of a 40-token match
        must not outweigh thirty 20-token matches that held."""
        blocks: list[tuple[float, float, list[int]]] = []  # (held, tried, buckets), priors included
        for bucket in sorted(COPY_PRIORS):
            block = (
                self.held.get(bucket, 0) + COPY_PRIORS[bucket] * COPY_PRIOR_WEIGHT,
                self.tried.get(bucket, 0) + COPY_PRIOR_WEIGHT,
                [bucket],
            )
            while blocks and blocks[-1][0] / blocks[-1][1] > block[0] / block[1]:
                held, tried, buckets = blocks.pop()
                block = (held + block[0], tried + block[1], buckets + block[2])
            blocks.append(block)
        table, floor = {}, 0.0
        for held, tried, buckets in blocks:
            mean = held / tried
            # The caution shrinks with evidence, so it could undo the order: keep it non-decreasing.
            floor = max(floor, mean - COPY_CAUTION * math.sqrt(mean * (1 - mean) / tried))
            for bucket in buckets:
                table[bucket] = floor
        return table


def expected_tokens(rates: Sequence[float]) -> list[float]:
    """E(k) for k = 0..len(rates): 1 (the target's own token) + expected accepted drafts."""
    totals, survive = [1.0], 1.0
    for rate in rates:
        survive *= rate
        totals.append(totals[-1] + survive)
    return totals


def best_length(rates: Sequence[float], step_cost: float, costs: Costs, k_max: int) -> tuple[int, float]:
    """(k, tokens per second) maximising E(k) / (k * step_cost + verify(k + 1)); k = 0 included.

    Only batch sizes that were measured are candidates: verify costs are not smooth in n (on a CPU a
    batch whose size is a multiple of the kernel's tile can cost less than a smaller one), so an
    interpolated cost could pick a size that is in truth dearer than its neighbours.
    """
    expected = expected_tokens(rates[:k_max])
    best = (0, expected[0] / costs.verify_time(1))
    for k in range(1, len(expected)):
        if k + 1 not in costs.verify:
            continue
        speed = expected[k] / (k * step_cost + costs.verify_time(k + 1))
        if speed > best[1]:
            best = (k, speed)
    return best


@dataclass(frozen=True)
class Choice:
    strategy: str  # "target" | "ngram" | "draft-model"
    k: int
    speed: float  # predicted tokens per second
    reason: str


class AdaptiveDrafter:
    """Picks target alone, prompt lookup or the draft model each round, as the numbers say."""

    name = "auto"

    def __init__(
        self,
        costs: Costs,
        *,
        ngram: NgramDrafter | None = None,
        model: DraftModelDrafter | None = None,
        optimism: float = 1.0,
        priors: dict[str, float] | None = None,
        ends_copy: Callable[[int], bool] | None = None,
    ) -> None:
        self.costs = costs
        self.ngram = ngram
        self.model = model
        # A copy ends before a control token: a reply quoting the end of the user's message must not be
        # offered the chat template's markup that follows it in the prompt.
        self.ends_copy = ends_copy or (lambda _token: False)
        self.optimism = optimism
        self.priors = priors or {}
        self.arms: dict[tuple, Acceptance] = {}
        self.copies = CopyOdds()
        self.last: Choice = Choice("target", 0, 0.0, "no round yet")
        self._arm: tuple | None = None
        self._run = 0  # tokens copied in a row (over fully accepted rounds) in this reply
        self._longest_run = 0
        self._offer: tuple[list[int], int, int] | None = None  # copy on offer, its match length, context length
        self.rounds_by_strategy: dict[str, int] = {"target": 0, "ngram": 0, "draft-model": 0}

    def _acceptance(self, arm: tuple) -> Acceptance:
        if arm not in self.arms:
            self.arms[arm] = Acceptance(prior=self.priors.get(arm[0], 0.6))
        return self.arms[arm]

    def prefill(self, context: Sequence[int]) -> None:
        if self.ngram is not None:
            self.ngram.prefill(context)
        if self.model is not None:
            self.model.prefill(context)
        self._run = self._longest_run = 0
        self._offer = None
        # Each reply learns its own copy odds from the measured priors: how much the last reply copied
        # says little about this one (kept across replies, a summary's broken quotes made the next
        # reply's code edits timid, and an edit's long copies made the next prose reply reckless).
        self.copies = CopyOdds()

    @property
    def copy_cap(self) -> int:
        """Copies may grow to a few times the longest run this reply has copied so far: a long draft is
        only risked where the reply has shown it is copying its input (a prose reply quoting a few words
        would otherwise be offered a 60-token guess whose every position looks likely)."""
        return min(MAX_K, max(FIRST_COPY_CAP, COPY_CAP_GROWTH * self._longest_run))

    def choose(self, context: Sequence[int], k_max: int) -> tuple[Choice, tuple | None, int | None]:
        k_max = min(k_max, MAX_K)
        best = Choice("target", 0, 1.0 / self.costs.verify_time(1), "drafting would not pay")
        best_arm, start = None, None
        if self.ngram is not None and k_max > 0:
            n, begin = self.ngram.match(context)
            if begin is not None:
                longest = min(k_max, self.copy_cap)
                # One token more than can be drafted: the round's own token is checked against it too.
                copy = self.ngram.index.tokens[begin : begin + longest + 1]
                copy = copy[: next((i for i, token in enumerate(copy) if self.ends_copy(token)), len(copy))]
                self._offer = (copy, n, len(context))
                rates = [self.copies.rate(n + i) for i in range(min(len(copy), longest))]
                k, speed = best_length(rates, self.costs.ngram_step, self.costs, len(rates))
                if k and speed > best.speed:
                    best, best_arm, start = Choice("ngram", k, speed, f"copying a {n}-token match"), ("ngram",), begin
        if self.model is not None and self.costs.draft_step is not None and k_max > 0:
            arm = ("draft-model",)
            model_k = min(k_max, MODEL_MAX_K)
            rates = self._acceptance(arm).rates(model_k, self.optimism)
            k, speed = best_length(rates, self.costs.draft_step, self.costs, model_k)
            if k and speed > best.speed:
                best, best_arm, start = Choice("draft-model", k, speed, "draft model pays"), arm, None
        return best, best_arm, start

    def _check_offer(self, context: Sequence[int]) -> None:
        """Book the last copy on offer against the tokens produced since, up to the first that broke it.
        Only those: the next offer covers what follows, so each token is booked once, with the match
        length the chooser saw when it had to judge that token."""
        if self._offer is None:
            return
        copy, matched, at = self._offer
        produced = context[at : at + len(copy)]
        held = next((i for i, (a, b) in enumerate(zip(copy, produced, strict=False)) if a != b), len(produced))
        for i in range(min(held + 1, len(produced))):
            self.copies.observe(matched + i, i < held)
        self._offer = None

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self._check_offer(context)
        choice, arm, start = self.choose(context, k)
        self.last, self._arm = choice, arm
        self.rounds_by_strategy[choice.strategy] += 1
        if choice.strategy == "ngram" and self.ngram is not None and start is not None:
            tokens = list(self.ngram.index.tokens[start : start + choice.k])
            return Draft(tokens=tokens, q=[None] * len(tokens), source="ngram")
        if choice.strategy == "draft-model" and self.model is not None:
            # Catch the draft's cache up first (rounds without it leave it behind), so that only the
            # drafting steps are timed: catch-up is not what a draft step costs.
            self.model.cache.feed(context[:-1], 0)
            started = time.perf_counter()
            draft = self.model.propose(context, choice.k, sampler)
            self.costs.observe_draft(max(1, len(draft)), time.perf_counter() - started)
            return draft
        return Draft()

    def feedback(self, drafted: int, accepted: int, verify_s: float) -> None:
        self.costs.observe_verify(drafted + 1, verify_s)
        if self._arm is not None and self._arm[0] == "draft-model":
            # A confidence stop before the first guess counts as a miss.
            self._acceptance(self._arm).observe(max(drafted, 1), accepted)
        whole_copy = self.last.strategy == "ngram" and drafted > 0 and accepted == drafted
        if self.last.strategy == "ngram" and drafted:
            self._run += accepted
            self._longest_run = max(self._longest_run, self._run)
        if not whole_copy:  # any round that is not a whole copy ends the run
            self._run = 0
        self._arm = None  # a round without a proposal (k_round = 0) must not be booked to the last arm
