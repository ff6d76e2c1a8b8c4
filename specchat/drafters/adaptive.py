"""Choosing, every round, whether and how much to draft: the draft length that maximises expected
tokens per second, where "no draft" (k = 0, the target alone) is always a candidate.

Expected tokens of a k-token draft: E = 1 + sum_i prod_{j<=i} a_j, with a_j the estimated acceptance
of position j given the previous ones were accepted (learned online per strategy, with an optimistic
bonus that shrinks as evidence grows, so an untried strategy gets a few chances and no more).
Time: k draft steps + one verify batch of k + 1 tokens, from measured costs updated online.
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

MAX_K = 64  # longest copy: a verify batch of 33-65 tokens costs far less per token than one of 2-9
MODEL_MAX_K = 16  # longest draft-model draft: each of its tokens costs a draft step
FIRST_COPY_CAP = 8  # longest copy before this reply has shown that it copies long runs
EMA = 0.2  # weight of a new timing observation
# Prior acceptance of a copied continuation by match length: a long match means the reply is copying
# its input (editing, quoting), and copies tend to go on. Learned online from there.
NGRAM_PRIORS = {1: 0.1, 2: 0.2, 4: 0.35, 8: 0.6, 16: 0.8, 32: 0.9}


def _bucket(length: int) -> int:
    return max(b for b in NGRAM_PRIORS if b <= length)


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
        old = self.verify.get(n)
        self.verify[n] = seconds if old is None else (1 - EMA) * old + EMA * seconds

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

    @property
    def evidence(self) -> int:
        return self.tried[0]


def expected_tokens(rates: Sequence[float]) -> list[float]:
    """E(k) for k = 0..len(rates): 1 (the target's own token) + expected accepted drafts."""
    totals, survive = [1.0], 1.0
    for rate in rates:
        survive *= rate
        totals.append(totals[-1] + survive)
    return totals


def best_length(rates: Sequence[float], step_cost: float, costs: Costs, k_max: int) -> tuple[int, float]:
    """(k, tokens per second) maximising E(k) / (k * step_cost + verify(k + 1)); k = 0 included."""
    expected = expected_tokens(rates[:k_max])
    best = (0, expected[0] / costs.verify_time(1))
    for k in range(1, len(expected)):
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
        breaks_line: Callable[[int], bool] | None = None,
    ) -> None:
        self.costs = costs
        self.ngram = ngram
        self.model = model
        # Copies tend to hold within a line and break at the next one (edits change indentation and
        # names line by line), so positions after a line break are estimated separately.
        self.breaks_line = breaks_line or (lambda _token: False)
        self.optimism = optimism
        self.priors = priors or {}
        self.arms: dict[tuple, Acceptance] = {}
        self.last: Choice = Choice("target", 0, 0.0, "no round yet")
        self._arm: tuple | None = None
        self._streak = False  # the previous round was a fully accepted n-gram copy
        self._run = 0  # tokens copied in a row (over fully accepted rounds) in this reply
        self._longest_run = 0
        # Copies that were on offer, with the context length they were offered at: checked against the
        # tokens the target then produced, so every arm learns every round, drafted or not.
        self._offers: list[tuple[tuple, list[int], int, int]] = []  # arm, copy, context length, booked
        self.rounds_by_strategy: dict[str, int] = {"target": 0, "ngram": 0, "draft-model": 0}

    def _acceptance(self, arm: tuple) -> Acceptance:
        if arm not in self.arms:
            prior = self.priors.get(arm[0])
            if prior is None:
                prior = NGRAM_PRIORS[arm[1]] if arm[0] == "ngram" else 0.6
            if arm[-1] == "next-line":
                prior *= 0.5
            self.arms[arm] = Acceptance(prior=prior)
        return self.arms[arm]

    def prefill(self, context: Sequence[int]) -> None:
        if self.ngram is not None:
            self.ngram.prefill(context)
        if self.model is not None:
            self.model.prefill(context)
        self._streak = False
        self._run = self._longest_run = 0
        self._offers = []

    @property
    def copy_cap(self) -> int:
        """Copies may grow to twice the longest run this reply has copied so far: a long draft is only
        risked where the reply has shown it is copying its input (a prose reply quoting a few words
        would otherwise be offered a 60-token guess whose every position looks likely)."""
        return min(MAX_K, max(FIRST_COPY_CAP, 2 * self._longest_run))

    def choose(self, context: Sequence[int], k_max: int) -> tuple[Choice, tuple | None, int | None]:
        k_max = min(k_max, MAX_K)
        best = Choice("target", 0, 1.0 / self.costs.verify_time(1), "drafting would not pay")
        best_arm, start = None, None
        if self.ngram is not None and k_max > 0:
            n, begin = self.ngram.match(context)
            if begin is not None:
                arm = ("ngram", _bucket(n), self._streak)
                if len(self._offers) < MAX_K:
                    self._offers.append((arm, self.ngram.index.tokens[begin : begin + MAX_K], len(context), 0))
                continuation = self.ngram.index.tokens[begin : begin + min(k_max, self.copy_cap)]
                rates = self._ngram_rates(arm, continuation)
                k, speed = best_length(rates, self.costs.ngram_step, self.costs, len(continuation))
                if k and speed > best.speed:
                    best, best_arm, start = Choice("ngram", k, speed, f"copying a {n}-token match"), arm, begin
        if self.model is not None and self.costs.draft_step is not None and k_max > 0:
            arm = ("draft-model",)
            model_k = min(k_max, MODEL_MAX_K)
            rates = self._acceptance(arm).rates(model_k, self.optimism)
            k, speed = best_length(rates, self.costs.draft_step, self.costs, model_k)
            if k and speed > best.speed:
                best, best_arm, start = Choice("draft-model", k, speed, "draft model pays"), arm, None
        return best, best_arm, start

    def _ngram_rates(self, arm: tuple, continuation: Sequence[int]) -> list[float]:
        """Rates for this line's part of the copy from `arm`, for the part after a line break from its
        "next line" twin (positions counted from the break)."""
        cut = self._line_cut(continuation)
        # No optimism: every offered copy is checked against what the target produced (_check_offers),
        # so prompt lookup needs no exploration.
        here = self._acceptance(arm).rates(cut, 0.0)
        rest = len(continuation) - cut
        if rest <= 0:
            return here
        return here + self._acceptance((*arm, "next-line")).rates(rest, 0.0)

    def _line_cut(self, copy: Sequence[int]) -> int:
        """Length of the copy's first line, its line break included (the whole copy if it has none)."""
        return next((i + 1 for i, token in enumerate(copy) if self.breaks_line(token)), len(copy))

    def _check_offers(self, context: Sequence[int]) -> None:
        """Book each offered copy position by position as the text shows whether it held."""
        waiting = []
        for arm, offered, at, booked in self._offers:
            produced = context[at : at + len(offered)]
            held = next((i for i, (a, b) in enumerate(zip(offered, produced, strict=False)) if a != b), len(produced))
            broke = held < len(produced)
            self._book(arm, offered, booked, held, broke)
            if not broke and held < len(offered):
                waiting.append((arm, offered, at, held))
        self._offers = waiting

    def _book(self, arm: tuple, offered: list[int], first: int, held: int, broke: bool) -> None:
        """Positions first..held-1 held, and position `held` failed if `broke`. Positions after the
        copy's first line break go to the arm's "next line" twin, counted from the break."""
        cut = self._line_cut(offered)
        for i in range(first, held + broke):
            where, position = (arm, i) if i < cut else ((*arm, "next-line"), i - cut)
            if position < MAX_K:
                counts = self._acceptance(where)
                counts.tried[position] += 1
                counts.accepted[position] += i < held

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self._check_offers(context)
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
        if self._arm is not None and self._arm[0] == "draft-model" and drafted == 0:
            self._acceptance(self._arm).observe(1, 0)  # a confidence stop before the first guess: a miss
        if self._arm is not None and drafted and self._arm[0] != "ngram":  # copies: booked by _check_offers
            self._acceptance(self._arm).observe(drafted, accepted)
        self._streak = self.last.strategy == "ngram" and drafted > 0 and accepted == drafted
        if self.last.strategy == "ngram" and drafted:
            self._run += accepted
            self._longest_run = max(self._longest_run, self._run)
        if not self._streak:  # any round that is not a whole copy ends the run
            self._run = 0
        self._arm = None  # a round without a proposal (k_round = 0) must not be booked to the last arm
