"""The cost model of speculative decoding: what a verify batch and a draft step cost on this machine.

    c     = draft step time / target step time
    v(n)  = time for the target to verify a batch of n tokens / one target step
    E(k)  = 1 + sum_i prod_{j<=i} a_j          expected tokens of a k-token draft (a_j: conditional acceptance)
    S(k)  = E(k) / (k c + v(k + 1))            speedup over the target alone

Decisions use only the RATIOS c and v(n), measured together (interleaved, within one measurement: costmeasure), so
that a machine that gets busier or quieter later scales every size alike: the online updates move one
scale, seconds per target step, and never divide a fresh single step into stale batch times. Deeper into a long
text than a calibration's, a batch costs more single steps than calibrated: that excess is learned from the rounds
(costexcess) and v(n) includes it.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .costexcess import BatchExcess
from .modes import SPEC

EMA = 0.1  # weight of one new timing in the online scale
SPEC_MAX_K = SPEC.max_k  # the draft model's longest draft, in auto as in --mode spec
LOOKUP_STEP = 5e-4  # a lookup-drafted token in target steps (a dictionary lookup next to a forward pass)
DRIFT = 1.25  # the step time moved by more than this factor: the saved calibration is stale
DRIFT_ROUNDS = 32  # ... judged over at least this many rounds
# ... by the median of the latest this many: a running average (about ten rounds of memory) read a short
# spell of slow rounds on a shared VM as drift, and the next start spent seconds measuring again. A slowdown
# that lasts minutes still counts (docs/bench.md, 2026-12-03).
DRIFT_WINDOW = 64
# ... at most this far into the text: beyond, a step is slower because attention reads a longer cache
# (on the Zen 4 a single step took 1.37x the calibrated one at 2,935 tokens, 1.03-1.12x at 290-450), which
# measuring again (after the same ~100-token text) cannot change: every run on a long prompt would
# otherwise mark the calibration stale and the next start would spend seconds measuring it again.
DRIFT_CONTEXT = 1024


def expected_tokens(rates: Sequence[float]) -> list[float]:
    """E(k) for k = 0..len(rates): 1 (the target's own token) + expected accepted drafts."""
    totals, survive = [1.0], 1.0
    for rate in rates:
        survive *= rate
        totals.append(totals[-1] + survive)
    return totals


def iid_expected(a: float, k: int) -> float:
    """E(a, k) = (1 - a^(k+1)) / (1 - a): the same with one acceptance rate a at every position."""
    return expected_tokens([a] * max(k, 0))[-1]


@dataclass
class Costs:
    """Ratios in target steps (v(1) = 1) plus the current seconds of one target step."""

    verify: dict[int, float]  # batch size n -> v(n); only measured sizes are drafted to
    draft_step: float | None = None  # c; None: no draft model measured
    step_s: float = 0.0  # seconds of one target step, kept current online
    calibrated_step_s: float = 0.0  # ... as the calibration measured it
    busy: bool = False  # measured while other processes used the CPUs
    rounds_seen: int = 0
    # Seconds per step from the latest rounds within DRIFT_CONTEXT tokens only: what drift is judged on.
    near_samples: deque[float] = field(default_factory=lambda: deque(maxlen=DRIFT_WINDOW), init=False, repr=False)
    # What batches cost beyond the calibration now, learned from the rounds (deep into a long text: costexcess).
    excess: BatchExcess = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.excess = BatchExcess(self.calibrated_step_s)

    @classmethod
    def from_seconds(cls, verify_s: dict[int, float], draft_step_s: float | None = None, **extra) -> Costs:
        step = verify_s[1]
        ratios = {n: s / step for n, s in verify_s.items()}
        c = draft_step_s / step if draft_step_s is not None else None
        return cls(ratios, c, step, step, **extra)

    def v(self, n: int) -> float:
        """Verify cost of n tokens in target steps as batches cost now (deep into a long text, more than
        calibrated: costexcess); between measured sizes, interpolated."""
        return self.excess.ratio(n, self.calibrated_v(n))

    def calibrated_v(self, n: int) -> float:
        """v(n) as the calibration measured it; between measured sizes, interpolated."""
        if n in self.verify:
            return self.verify[n]
        below = [m for m in self.verify if m < n]
        above = [m for m in self.verify if m > n]
        if below and above:
            lo, hi = max(below), min(above)
            return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (n - lo) / (hi - lo)
        if below:  # beyond the largest measurement: its per-token cost
            last = max(below)
            return self.verify[last] * n / last
        return self.verify[min(above)]

    @property
    def c(self) -> float | None:
        return self.draft_step

    def measured(self, n: int) -> bool:
        return n in self.verify

    def speedup(self, rates: Sequence[float], step_cost: float, fixed: float = 0.0) -> list[float]:
        """S(k) for k = 0..len(rates), each draft token costing step_cost target steps and drafting at all
        `fixed` more (k = 0 drafts nothing: 1.0)."""
        expected = expected_tokens(rates)
        return [expected[k] / ((fixed + k * step_cost) * (k > 0) + self.v(k + 1)) for k in range(len(expected))]

    def best_length(
        self, rates: Sequence[float], step_cost: float, fixed: float = 0.0, cautious: Sequence[float] | None = None
    ) -> tuple[int, float]:
        """(k, S(k)) maximising the speedup over measured batch sizes; k = 0 (S = 1) always a candidate.

        Interpolated sizes are never chosen: batch costs are not smooth in n (on a CPU a batch that fills
        the kernel's tile can cost less than a smaller one), so an interpolated cost could pick a size
        that is dearer than its neighbours.

        With `cautious` rates (per position, at most `rates`) the best length must pay under those too.
        Where it does not, the length that pays most under the cautious rates is taken instead, with
        that cautious speedup (a fallback is judged cautiously throughout): on the Zen 4 a copy's 15
        tokens pay only on the plain estimate while its 3 pay for sure, and the 3 are worth drafting."""
        best = self._best_measured(self.speedup(rates, step_cost, fixed))
        if cautious is None or not best[0]:
            return best
        floor = self.speedup(cautious, step_cost, fixed)
        return best if floor[best[0]] > 1.0 else self._best_measured(floor)

    def _best_measured(self, speeds: Sequence[float]) -> tuple[int, float]:
        """(k, speeds[k]) for the fastest k >= 1 whose batch (k + 1) was measured; (0, 1.0) if none beats 1."""
        best = (0, 1.0)
        for k, speed in enumerate(speeds):
            if k and self.measured(k + 1) and speed > best[1]:
                best = (k, speed)
        return best

    def ceiling(self, step_cost: float, longest: int | None = None) -> tuple[int, float]:
        """(batch, speedup) if every guess held: the most drafting can give on this machine, over the
        measured batch sizes (drafts of at most `longest` tokens). On a 2-core CPU, where a batch of 16
        costs about 8 target steps, even perfect guesses give about 2x; on a GPU, where it costs about
        one, over 10x."""
        most = max(self.verify) - 1
        k, speedup = self.best_length([1.0] * min(most, longest or most), step_cost)
        return k + 1, speedup

    def ceilings(self) -> dict[str, tuple[int, float]]:
        """ceiling() for prompt lookup and, where measured, the draft model, which drafts at most
        SPEC_MAX_K tokens a round (a batch of 64 it never drafts is no ceiling of its)."""
        calibrated = replace(self)  # what the calibration promises, not what the latest rounds' depth allows
        out = {"lookup": calibrated.ceiling(LOOKUP_STEP)}
        if self.draft_step is not None:
            out["draft model"] = calibrated.ceiling(self.draft_step, SPEC_MAX_K)
        return out

    def ceilings_keyed(self) -> dict[str, tuple[int, float]]:
        """ceilings() keyed as the JSON reports key them (`draft_model`): bench's cost model and tune's --json."""
        return {name.replace(" ", "_"): best for name, best in self.ceilings().items()}

    def draft_on(
        self, chances: Sequence[float], k: int, step_cost: float, fixed: float, ahead: Sequence[float]
    ) -> int | None:
        """Mid-draft: None to draft another token, else how many of those drafted so far to verify.

        `chances[i]`: the probability that guesses 1..i+1 all hold (the draft model's own confidence
        in each, multiplied); guesses not made yet are judged by `ahead` (per position, the plain
        estimate), up to k. Steps already drafted are spent whichever way this goes, so stopping weighs
        only what is left: a guess the draft is unsure of is not worth a verify slot where slots cost
        (a CPU), and nothing is drafted on that would not pay. Only measured batch sizes, as best_length."""
        drafted = len(chances)
        spent = fixed + drafted * step_cost
        expected = list(itertools.accumulate(chances, initial=1.0))  # chances are already joint: just sum them
        speeds = {
            m: expected[m] / (spent + self.v(m + 1)) for m in range(drafted + 1) if m == 0 or self.measured(m + 1)
        }
        keep = max(speeds, key=speeds.__getitem__)  # the first of equals: the fewest guesses
        stop_speed = speeds[keep]
        survive, total = (chances[-1] if chances else 1.0), expected[-1]
        for m in range(drafted + 1, k + 1):
            survive *= ahead[min(m, len(ahead)) - 1] if ahead else 0.0
            total += survive
            if self.measured(m + 1) and total / (fixed + m * step_cost + self.v(m + 1)) > stop_speed:
                return None
        return keep

    # -- keeping the scale current -------------------------------------------------------------------

    def observe_verify(self, n: int, seconds: float, context: int = 0) -> None:
        """A verify batch of n tokens after `context` tokens took `seconds`: one sample of seconds per
        target step."""
        if n not in self.verify or not _timing(seconds):
            return
        if context <= DRIFT_CONTEXT:  # as short as a calibration's text: the calibration holds here
            self.excess = BatchExcess(self.calibrated_step_s)
        else:
            self.excess.observe(n, self.verify[n], seconds)
        sample = seconds / self.v(n)
        self.step_s = _ema(self.step_s, sample)
        self.rounds_seen += 1
        if context <= DRIFT_CONTEXT:
            self.near_samples.append(sample)

    def observe_draft(self, steps: int, seconds: float) -> None:
        """Draft steps are timed in the same rounds as verifies, so their ratio is like for like."""
        if steps <= 0 or self.step_s <= 0 or not _timing(seconds):
            return
        self.draft_step = _ema(self.draft_step, seconds / steps / self.step_s)

    @property
    def drift(self) -> float:
        """Seconds per target step now / as calibrated (1.0: unchanged)."""
        return self._vs_calibration(self.step_s)

    def _vs_calibration(self, step_s: float) -> float:
        return step_s / self.calibrated_step_s if self.calibrated_step_s > 0 and step_s > 0 else 1.0

    @property
    def steady(self) -> bool:
        """The machine still runs at the speed it was calibrated at (judged after a few rounds). Unlike
        `drifted`, this counts rounds deep into a long text too, on purpose: where a step costs 1.4x the
        calibrated one, the batch ratios may have moved as well, so auto drafts no further than its
        drafters vouch for (auto._within_reach) until the text is short again."""
        return self.rounds_seen < 4 or 1 / DRIFT <= self.drift <= DRIFT

    def forget_drift_samples(self) -> None:
        """The step times `drifted` judges, forgotten (they were taken while other programs slowed the machine)."""
        self.near_samples.clear()

    @property
    def drifted(self) -> bool:
        """The machine runs at another speed than when calibrated, judged where the text is as short as a
        calibration's (DRIFT_CONTEXT): the calibration should be taken again."""
        if self.near_rounds < DRIFT_ROUNDS:
            return False
        return not 1 / DRIFT <= self._vs_calibration(statistics.median(self.near_samples)) <= DRIFT

    @property
    def near_rounds(self) -> int:
        return len(self.near_samples)

    def as_dict(self) -> dict:
        return {
            "target_step_s": round(self.calibrated_step_s, 6),
            "c": round(self.draft_step, 4) if self.draft_step is not None else None,
            "v": {str(n): round(v, 4) for n, v in sorted(self.verify.items())},
            "busy": self.busy,
            # the speedup if every guess held, over the measured sizes
            "ceiling": {key: round(speedup, 3) for key, (_, speedup) in self.ceilings_keyed().items()},
        }


def _timing(seconds: float) -> bool:
    """A duration a clock could have measured, above 0 and finite: a NaN (an injected clock's glitch) would stay in
    the running estimates for good, and a draft step of 0 s or less would make the draft model look free."""
    return 0 < seconds < math.inf


def _ema(current: float | None, sample: float) -> float:
    """One timing folded into a running estimate (the sample itself while there is none)."""
    return sample if current is None or current <= 0 else (1 - EMA) * current + EMA * sample
