"""The drafter contract (after transformers' candidate generators)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..sampling import Sampler


@dataclass
class Draft:
    """Proposed tokens and, per token, the distribution q it was drawn from (None: a deterministic guess)."""

    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray | None] = field(default_factory=list)
    # q of a token cut off after `tokens` because the target cannot accept it (an id outside its
    # vocabulary): that position is a certain rejection, so its correction comes from norm(max(0, p - q)).
    rejected_q: np.ndarray | None = None
    source: str = ""  # which strategy drafted it ("draft-model", "ngram"), for stats and the view

    def __len__(self) -> int:
        return len(self.tokens)


class Drafter(Protocol):
    name: str

    def prefill(self, context: Sequence[int]) -> None:
        """Optional warm-up on the prompt, so that its cost counts as prefill, not as drafting."""
        ...

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens that are likely to follow `context`."""
        ...

    def feedback(self, drafted: int, accepted: int, verify_s: float) -> None:
        """After every round (also one with no draft): how many tokens of the last proposal the target
        kept, and how long the verify batch of drafted + 1 tokens took."""
        ...
