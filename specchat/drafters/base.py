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

    def feedback(self, drafted: int, accepted: int) -> None:
        """How many of the last proposal the target kept."""
        ...
