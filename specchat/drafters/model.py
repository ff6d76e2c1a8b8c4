"""Drafting with a small model of the same family."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..models_api import CachedModel, LanguageModel, common_prefix
from ..sampling import Sampler
from .base import Draft, Offer, Outcome

PRIOR = 0.6  # acceptance believed before any evidence (`specchat tune` measures a better one)
PRIOR_STRENGTH = 4.0  # sweep
DECAY = 0.93  # sweep
CAUTION = 0.5  # sweep


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

    def __init__(self, model: LanguageModel, p_min: float = 0.0, prior: float = PRIOR) -> None:
        self.cache = CachedModel(model)
        self.p_min = p_min  # confidence stop: no guess whose probability is below this (0 = off)
        self.prior = prior
        self.acceptance = Acceptance(prior)

    def reset(self) -> None:
        self.cache.forget()
        self.acceptance = Acceptance(self.prior)

    def prefill(self, context: Sequence[int]) -> None:
        self.cache.feed(context, 0)

    def catch_up(self, context: Sequence[int]) -> None:
        """Bring the cache up to the text before drafting (rounds drafted by others leave it behind), so
        that timing a proposal times drafting only."""
        self.cache.feed(context[:-1], 0)

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        # Rounds drafted by others leave the cache behind: catching up is part of what drafting costs now.
        behind = max(0, len(context) - 1 - common_prefix(self.cache.tokens, context))
        rates = self.acceptance.rates
        return Offer(rates(k_max, CAUTION), rates(k_max, -CAUTION), behind, rates(k_max, 0.0))

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        draft = Draft(source=self.name)
        if k <= 0:
            return draft
        logits = self.cache.feed(context, 1)[0]
        for _ in range(k):
            token, q = sampler.pick(logits)
            if self.p_min > 0.0 and _confidence(logits, token, q) < self.p_min:
                break  # an unlikely guess is likely rejected: stop before paying to verify it
            draft.tokens.append(token)
            draft.q.append(q)
            if len(draft) == k or self.cache.model.is_eog(token):
                break
            logits = self.cache.feed([*context, *draft.tokens], 1)[0]
        return draft

    def learn(self, outcome: Outcome) -> None:
        if outcome.draft.source == self.name:
            # A confidence stop before the first guess counts as a miss.
            self.acceptance.observe(max(len(outcome.draft), 1), outcome.accepted)


def _confidence(logits: np.ndarray, token: int, q: np.ndarray | None) -> float:
    """The draft's probability of its own guess (softmax of the raw logits when greedy)."""
    if q is not None:
        return float(q[token])
    shifted = np.exp(logits - logits.max())
    return float(shifted[token] / shifted.sum())
