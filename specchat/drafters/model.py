"""Drafting with a small model of the same family."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..models_api import CachedModel, LanguageModel
from ..sampling import Sampler
from .base import Draft


class DraftModelDrafter:
    """Autoregressive guesses from a draft model whose KV cache follows the accepted text.

    The cache is synced lazily at the next proposal: after a rejection it rolls back to the accepted
    prefix; after a full acceptance it still lacks the last draft token, which is then evaluated in one
    batch together with the target's bonus token.
    """

    name = "draft-model"

    def __init__(self, model: LanguageModel, p_min: float = 0.0) -> None:
        self.cache = CachedModel(model)
        self.p_min = p_min  # confidence stop: no guess whose probability is below this (0 = off)

    def prefill(self, context: Sequence[int]) -> None:
        self.cache.feed(context, 0)

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

    def feedback(self, drafted: int, accepted: int, verify_s: float) -> None:
        """The fixed-length model drafter learns nothing; adaptive drafters override this."""


def _confidence(logits: np.ndarray, token: int, q: np.ndarray | None) -> float:
    """The draft's probability of its own guess (softmax of the raw logits when greedy)."""
    if q is not None:
        return float(q[token])
    shifted = np.exp(logits - logits.max())
    return float(shifted[token] / shifted.sum())
