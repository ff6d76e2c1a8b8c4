"""Drafting with a small model of the same family."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import EngineError
from ..models_api import CachedModel, LanguageModel, common_prefix, readable_by
from ..sampling import Sampler
from .base import Draft, Offer, Outcome

PRIOR = 0.6  # acceptance believed before any evidence (`specchat tune` measures a better one)
PRIOR_STRENGTH = 4.0  # sweep
DECAY = 0.93  # sweep
CAUTION = 0.5  # sweep


# How often the target agrees with a guess, by the draft's own probability of it (bucket: the largest
# key <= it). The draft is under-confident: on the recorded traces (benchmarks/record_traces.py, conf)
# guesses it gave 0.5-0.7 held 64-91% of the time by kind of text, 0.3-0.5 held 35-64%; set at about
# the lower end, and learned as the draft model drafts.
CONFIDENCE_PRIORS = {0.0: 0.25, 0.3: 0.45, 0.5: 0.7, 0.7: 0.85, 0.9: 0.97, 0.99: 0.995}
CONFIDENCE_WEIGHT = 8.0  # in observed guesses
CONFIDENCE_DECAY = 0.98  # per round: slower than DECAY, a bucket sees few guesses a round


@dataclass
class Calibration:
    """The chance that a guess holds, by the draft's own probability of it: learned from every guess
    the target judged (conditional, as Acceptance: a guess after a rejected one is not judged), recent
    rounds counting most."""

    tried: dict[float, float] = field(default_factory=dict)
    held: dict[float, float] = field(default_factory=dict)

    def chance(self, confidence: float) -> float:
        bucket = _bucket(confidence)
        held = self.held.get(bucket, 0.0) + CONFIDENCE_PRIORS[bucket] * CONFIDENCE_WEIGHT
        return held / (self.tried.get(bucket, 0.0) + CONFIDENCE_WEIGHT)

    def observe(self, confidences: Sequence[float], accepted: int) -> None:
        # Older rounds fade: code after prose is another calibration.
        self.tried = {bucket: n * CONFIDENCE_DECAY for bucket, n in self.tried.items()}
        self.held = {bucket: n * CONFIDENCE_DECAY for bucket, n in self.held.items()}
        for i, confidence in enumerate(confidences[: accepted + 1]):
            bucket = _bucket(confidence)
            self.tried[bucket] = self.tried.get(bucket, 0.0) + 1
            self.held[bucket] = self.held.get(bucket, 0.0) + (i < accepted)


def _bucket(confidence: float) -> float:
    return max(key for key in CONFIDENCE_PRIORS if key <= confidence)


@dataclass
class Acceptance:
    """Conditional acceptance per draft position, from recent rounds (old ones fade), with a prior."""

    prior: float = PRIOR
    strength: float = PRIOR_STRENGTH
    tried: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)

    def observe(self, drafted: int, accepted: int) -> None:
        # Position i is tried only when the positions before it were all accepted: conditional counts.
        self.tried = [t * DECAY for t in self.tried]
        self.held = [h * DECAY for h in self.held]
        for i in range(min(drafted, accepted + 1)):
            if i == len(self.tried):
                self.tried.append(0.0)
                self.held.append(0.0)
            self.tried[i] += 1
            self.held[i] += i < accepted

    def impute(self, start: int, chances: Sequence[float]) -> None:
        """Positions start, start + 1, ... were drafted but not verified (a stop kept the guesses before
        them, and all of those held): each counted as tried as often as it would have been reached, and
        held by its estimated chance. Without this the rates would describe only the guesses a stop
        kept, and look better than drafting that far is."""
        reached = 1.0
        for i, chance in enumerate(chances, start):
            while i >= len(self.tried):
                self.tried.append(0.0)
                self.held.append(0.0)
            self.tried[i] += reached
            self.held[i] += reached * chance
            reached *= chance

    def rates(self, k: int, caution: float) -> list[float]:
        """a_1..a_k, `caution` standard errors from the posterior mean (negative: optimistic). A position
        never reached starts from the one before it, not from the prior: positions behave alike, and
        otherwise a drafter that was only ever tried short could never look good long."""
        out, prior = [], self.prior
        for i in range(k):
            tried = self.tried[i] if i < len(self.tried) else 0.0
            held = self.held[i] if i < len(self.held) else 0.0
            n = tried + self.strength
            mean = (held + prior * self.strength) / n
            out.append(min(1.0, max(0.0, mean - caution * math.sqrt(mean * (1 - mean) / n))))
            prior = mean
        return out


class DraftModelDrafter:
    """Autoregressive guesses from a draft model whose KV cache follows the accepted text.

    The cache is synced lazily at the next proposal: after a rejection it rolls back to the accepted
    prefix; after a full acceptance it still lacks the last draft token, which is then evaluated in one
    batch together with the target's bonus token.
    """

    name = "spec"
    uses_model = True

    def __init__(
        self, model: LanguageModel, p_min: float = 0.0, prior: float = PRIOR, wait_for_first_token: bool = True
    ) -> None:
        self.cache = CachedModel(model)
        self.wait_for_first_token = wait_for_first_token  # False: prefill evaluates the prompt at once
        self.cold = False  # a reply began and the prompt is not read yet (spec: until the first token is out)
        self.p_min = p_min  # confidence stop: no guess whose probability is below this (0 = off)
        self.prior = prior
        self.acceptance = Acceptance(prior)
        self.steps = 0  # draft steps of the last proposal (a stop can keep fewer guesses than it made)
        self.calibration = Calibration()
        self._confidences: list[float] = []  # of the last proposal's guesses, kept ones first
        self._kept = 0

    def reset(self) -> None:
        self.cache.forget()
        self.cold = False
        self.acceptance = Acceptance(self.prior)
        self.calibration = Calibration()

    def _known(self, context: Sequence[int]) -> Sequence[int]:
        """The text as the draft can read it (models_api.readable_by)."""
        return readable_by(self.cache.model, context)

    def prefill(self, context: Sequence[int]) -> None:
        # The prompt waits for `warm`, after the first token: evaluated now, it would delay that token by
        # what the draft model's prefill costs (20-70% later on a 2-core Zen 4: seconds for a long
        # prompt). Auto may still catch it up for the first round, where its cost model says that
        # pays even charged in full (a GPU); spec mode's first round is the target alone.
        if self.wait_for_first_token:
            self.cold = True
        else:
            self.cache.feed(self._known(context), 0)

    def catch_up(self, context: Sequence[int]) -> None:
        """Bring the cache up to the text before drafting (rounds drafted by others leave it behind), so
        that timing a proposal times drafting only."""
        self.cache.feed(self._known(context)[:-1], 0)
        self.cold = False

    def warm(self, context: Sequence[int]) -> None:
        if self.cold:  # else auto caught it up for the first round already: the rest is drafting's
            self.catch_up(context)

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        # Rounds drafted by others leave the cache behind: catching up is part of what drafting costs now.
        behind = max(0, len(context) - 1 - common_prefix(self.cache.tokens, self._known(context)))
        rates = self.acceptance.rates
        return Offer(rates(k_max, CAUTION), rates(k_max, -CAUTION), behind, rates(k_max, 0.0), cold=self.cold)

    def propose(
        self, context: Sequence[int], k: int, sampler: Sampler, stop: Callable[[list[float]], int | None] | None = None
    ) -> Draft:
        """Up to k guesses. With `stop` (auto's, Costs.draft_on), after each guess: the chances that the
        guesses so far all hold, each judged by the draft's own probability of it (Calibration); it
        answers None to go on, else how many guesses to keep."""
        self.steps, self._confidences, self._kept = 0, [], 0
        if self.cold:
            return Draft()  # not the draft's round: nothing for learn() to count as a miss
        draft = Draft(source=self.name)
        if k <= 0:
            return draft
        context = self._known(context)
        logits = self.cache.feed(context, 1)[0]
        chances: list[float] = []
        for _ in range(k):
            try:
                token, q = sampler.pick(logits)
            except EngineError:  # a NaN or infinite row of the draft model: the draft ends, the target goes on
                break  # (failing the reply for it, which the target would answer as always, helps nobody)
            self.steps += 1
            sure = confidence(logits, token, q) if self.p_min > 0.0 or stop is not None else 1.0
            if sure < self.p_min:
                break  # an unlikely guess is likely rejected: stop before paying to verify it
            draft.tokens.append(token)
            draft.q.append(q)
            self._confidences.append(sure)
            chances.append((chances[-1] if chances else 1.0) * self.calibration.chance(sure))
            keep = stop(chances) if stop is not None else None
            if keep is not None:
                if q is not None:  # sampling: only the newest guess may go (see confidence)
                    keep = max(keep, len(draft) - 1)
                del draft.tokens[keep:], draft.q[keep:]
                break
            if len(draft) == k or self.cache.model.is_eog(token):
                break
            logits = self.cache.feed([*context, *draft.tokens], 1)[0]
        self._kept = len(draft)
        return draft

    def learn(self, outcome: Outcome) -> None:
        if outcome.draft.source != self.name:
            return
        kept, dropped = self._confidences[: self._kept], self._confidences[self._kept :]
        if outcome.draft or not dropped:  # a --p-min stop before the first guess counts as a miss
            self.acceptance.observe(max(len(outcome.draft), 1), outcome.accepted)
        else:  # auto's stop dropped every guess: older rounds fade, the guesses are imputed below
            self.acceptance.observe(0, 0)
        if len(kept) != len(outcome.draft):
            return
        self.calibration.observe(kept, outcome.accepted)
        if dropped and outcome.accepted == len(kept):  # auto's stop dropped guesses it was unsure of
            self.acceptance.impute(len(kept), [self.calibration.chance(c) for c in dropped])


def confidence(logits: np.ndarray, token: int, q: np.ndarray | None) -> float:
    """How sure the draft is at this position: its probability of its greedy guess (softmax of the raw
    logits), or when sampling the peak of the distribution q the guess was drawn from, NOT q[token].
    Whether a sampled guess is kept must not depend on which token was drawn there: keeping only likely
    draws would propose from another distribution than q, and accepting with min(1, p/q) would then no
    longer give the target's distribution. For the same reason a stop may drop only the newest sampled
    guess: the next position's peak depends on the token drawn before it (tests/test_speculative.py)."""
    if q is not None:
        return float(q.max())
    shifted = np.exp(logits - logits[token])
    return float(1.0 / shifted.sum())
