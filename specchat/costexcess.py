"""What a verify batch costs beyond the calibration, learned from the rounds themselves: deep into a long text.

A calibration times batches after a short text (a few hundred tokens). Deeper in, every token of a batch also
reads the whole cache (attention), so a batch costs more single steps than calibrated: on an Intel Xeon at
8,000 tokens a batch of 16 took 7.7 steps, not the 3.6 measured at 300 (4.4 at 2,000, 5.7 at 4,000;
docs/bench.md, 2026-12-06). Those timings fit

    seconds(n) = S v(n) + A n

to within a few percent for every batch size and depth measured: S the seconds of a calibrated step now (the
load scales it), A the extra seconds each verified token costs at this depth. Divided by v(n), that is a
straight line y = S + A x in x = n / v(n), fitted here over the recent rounds (older ones fading, so it follows
the depth as the text grows and a new reply starts elsewhere). A load that slows every size alike moves S
only, so only a real change in how batches scale moves A. The excess share a = A / S gives the batch ratios now:

    v_now(n) = (v(n) + a n) / (1 + a)          (v_now(1) = 1)

Where the recent rounds are all of one size (auto drafting copies round after round times no single step), they
say nothing about how cost grows with size: there the line is anchored at x = 0 by the calibration's own step
(S as calibrated, one round's weight). Under a load that came after the calibration the anchor reads some of
the load as excess, which errs on the side of drafting less; once rounds of other sizes are timed (the guard
times the target alone at least every 32 rounds) the anchor is dropped.

Only what the evidence shows for sure counts: a is the fit's lower confidence bound, and 0 until a few rounds
were seen, so a noisy stretch leaves the calibration as it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FADE = 0.95  # weight of a round per later round: about the last 20 rounds decide
MIN_ROUNDS = 6.0  # rounds (faded) before the fit counts ...
MIN_SPREAD = 1.0  # ... and this much spread of x around its mean (faded sum of squares): sizes that differ
ANCHOR = 1.0  # the weight of the calibrated step at x = 0
CONFIDENCE = 1.0  # standard errors below the fitted slope: what the evidence shows for sure
MAX_SHARE = 4.0  # beyond this the fit is a glitch, not attention (8,000 tokens on a 2-core CPU: about 0.5)


@dataclass
class BatchExcess:
    """Faded sums of the line fit y = S + A x over recent rounds; `share` is a = A / S (0 without evidence)."""

    anchor_s: float = 0.0  # the calibrated step's seconds: the line's point at x = 0 (none where 0)
    weight: float = 0.0
    sum_x: float = 0.0
    sum_y: float = 0.0
    sum_xx: float = 0.0
    sum_xy: float = 0.0
    sum_yy: float = 0.0
    share: float = 0.0

    def observe(self, n: int, v_n: float, seconds: float) -> None:
        """A batch of n tokens, calibrated at v(n) single steps, took `seconds`."""
        x, y = n / v_n, seconds / v_n
        self.weight = self.weight * FADE + 1.0
        self.sum_x = self.sum_x * FADE + x
        self.sum_y = self.sum_y * FADE + y
        self.sum_xx = self.sum_xx * FADE + x * x
        self.sum_xy = self.sum_xy * FADE + x * y
        self.sum_yy = self.sum_yy * FADE + y * y
        self.share = self._fitted_share()

    def _fitted_share(self) -> float:
        """The lower confidence bound of A / S: fitted on the rounds alone where their sizes differ enough, else
        anchored at the calibrated step (the anchor alone would read every slowdown of a single step deep into the
        text as batch excess: 6% too much for a batch of 4 at 2,100 tokens on the Xeon)."""
        if self.weight < MIN_ROUNDS:
            return 0.0
        line = self._line(0.0) or (self._line(ANCHOR) if self.anchor_s > 0 else None)
        if line is None:
            return 0.0
        slope, intercept, error = line
        sure = slope - CONFIDENCE * error
        if not (intercept > 0 and sure > 0):  # NaN too: a hand-edited tuning's ratio of 1e-300 overflows the sums
            return 0.0
        return min(sure / intercept, MAX_SHARE)

    def _line(self, anchor: float) -> tuple[float, float, float] | None:
        """(slope, intercept, slope's standard error) of the weighted least-squares line, with the calibrated step
        at x = 0 weighing `anchor` rounds; None where the sizes do not spread enough to tell a slope."""
        weight = self.weight + anchor  # the anchor adds nothing to the x sums (x = 0)
        mean_x, mean_y = self.sum_x / weight, (self.sum_y + anchor * self.anchor_s) / weight
        spread = self.sum_xx - weight * mean_x * mean_x
        if spread < MIN_SPREAD:
            return None
        slope = (self.sum_xy - weight * mean_x * mean_y) / spread
        sum_yy = self.sum_yy + anchor * self.anchor_s**2
        residual = max(0.0, sum_yy - weight * mean_y * mean_y - slope * slope * spread)
        error = math.sqrt(residual / max(weight - 2.0, 1.0) / spread)
        return slope, mean_y - slope * mean_x, error

    def ratio(self, n: int, v_n: float) -> float:
        """v_now(n): the batch of n in single steps as they cost now."""
        return (v_n + self.share * n) / (1.0 + self.share)
