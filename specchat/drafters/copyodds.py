"""Copy odds: the chance that a copy (prompt lookup's, the suffix index's) holds for one more token, by
how many tokens it has matched by then; priors measured by benchmarks/copy_odds.py, learned per reply."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..models_api import common_prefix

# Prior chance that a copy holds for one more token, by how many tokens it has matched so far (bucket:
# the largest key <= the length). A long match is the reply copying its input and goes on; a 1-token
# match rarely does. Measured on held-out replies by benchmarks/copy_odds.py (numbers in docs/modes.md).
COPY_PRIORS = {1: 0.15, 2: 0.5, 3: 0.7, 5: 0.85, 9: 0.95, 17: 0.97, 33: 0.98, 65: 0.98}
# ... the same for copies of the reply's own earlier tokens (a list's next item, a repeated key): lower
# at every length, since a reply repeats its own phrasing briefly, then moves on.
REPLY_COPY_PRIORS = {1: 0.15, 2: 0.35, 3: 0.5, 5: 0.55, 9: 0.8, 17: 0.9, 33: 0.95, 65: 0.95}
# ... the same for a copy where the reply rejoins its input a few tokens after a copy broke (_rejoin):
# one matched token there held 50-67% of the time, two 80-85%, against about 20% and 40-80% elsewhere.
REJOIN_COPY_PRIORS = {1: 0.45, 2: 0.75, 3: 0.85, 5: 0.9, 9: 0.95, 17: 0.97, 33: 0.98, 65: 0.98}
# Where the model tells which tokens break lines (line_role), copies of the input are judged apart by
# whether their match goes on past a line break: then the reply is copying whole lines of its input,
# and goes on (5-8 matched tokens held 98-100% per token, against 82-84% for matches within a line or
# ending at a break; benchmarks/copy_odds.py on its prompts, and on the bench suite's traces). Where it
# cannot tell, the tables above, which pool both. Set at or below the lower of the two measurements
# (3-4 tokens past a break held 6 of 6 and 87%), since a prior that is too high costs a whole verify
# batch before the reply's own evidence corrects it, and one too low only a few rounds' gain.
INLINE_COPY_PRIORS = {1: 0.15, 2: 0.5, 3: 0.7, 5: 0.8, 9: 0.9, 17: 0.95, 33: 0.97, 65: 0.97}
ALIGNED_COPY_PRIORS = {1: 0.15, 2: 0.5, 3: 0.85, 5: 0.95, 9: 0.97, 17: 0.98, 33: 0.98, 65: 0.98}
ALIGNED_REJOIN_PRIORS = {1: 0.45, 2: 0.85, 3: 0.93, 5: 0.95, 9: 0.97, 17: 0.98, 33: 0.98, 65: 0.98}
COPY_PRIOR_WEIGHT = 12.0  # in observed tokens: the priors come from data, a few tokens do not undo them
COPY_CAUTION = 1.0  # standard errors below the mean: a copy not drafted is still learned from


_BUCKETS = tuple(sorted(COPY_PRIORS))  # every prior table has these keys


def _bucket(length: int) -> int:
    """The largest bucket <= the length (asked for every position of every offer: a bisection)."""
    return _BUCKETS[bisect.bisect_right(_BUCKETS, max(1, length)) - 1]


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
    longest: int | None = None  # match lengths beyond this are judged (and learned) as this one
    priors: dict[int, float] = field(default_factory=lambda: COPY_PRIORS)
    _table: dict[int, tuple[float, float]] | None = field(default=None, repr=False)

    def rate(self, length: int, cautious: bool = True) -> float:
        """The cautious estimate (one standard error below), or the plain posterior mean."""
        if self._table is None:
            self._table = self._estimate()
        return self._table[self._bucket(length)][0 if cautious else 1]

    def observe(self, length: int, held: bool) -> None:
        bucket = self._bucket(length)
        self.tried[bucket] = self.tried.get(bucket, 0) + 1
        self.held[bucket] = self.held.get(bucket, 0) + held
        self._table = None

    def _bucket(self, length: int) -> int:
        return _bucket(length if self.longest is None else min(length, self.longest))

    def _estimate(self) -> dict[int, tuple[float, float]]:
        """Posterior means per bucket, made non-decreasing in the match length by pooling neighbours
        that disagree (a longer match is never less of a copy): one early break of a 40-token match
        must not outweigh thirty 20-token matches that held."""
        blocks: list[tuple[float, float, list[int]]] = []  # (held, tried, buckets), priors included
        for bucket in sorted(self.priors):
            block = (
                self.held.get(bucket, 0) + self.priors[bucket] * COPY_PRIOR_WEIGHT,
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
                table[bucket] = (floor, mean)
        return table


def book(odds_at: Callable[[int], CopyOdds], guess: Sequence[int], matched: int, produced: Sequence[int]) -> int:
    """Book a guess against the tokens produced, up to the first that broke it, token i in the odds
    `odds_at(i)` that judged it. Only those: the next offer covers what follows, so each token is
    booked once, with the match length the chooser saw when it had to judge that token. Returns how
    many tokens of the guess held."""
    produced = produced[: len(guess)]
    held = common_prefix(guess, produced)
    for i in range(min(held + 1, len(produced))):
        odds_at(i).observe(matched + i, i < held)
    return held
