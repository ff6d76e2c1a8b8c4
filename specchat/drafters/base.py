"""The drafter contract (after transformers' candidate generators).

A drafter is a small strategy object. It offers its own confidence in the tokens it could propose
(`offer`), proposes them (`propose`), and learns from what the target produced after every round
(`learn`), whether or not its proposal was the one verified. `prefill` and `warm` start a reply (before
and after its first token), `reset` forgets the conversation. The
auto controller combines any number of drafters through exactly these calls.
"""

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
    source: str = ""  # the mode whose drafter drafted it ("spec", "ngram"), for stats and the view
    prefill_s: float = 0.0  # of the proposal's time, a cold draft model reading the prompt before the first token

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Offer:
    """What a drafter could propose now: per position, the chance that the token holds given the ones
    before it held. `rates` is the cautious estimate that must promise a gain; `mean` the plain one that
    ranks drafters which do; `upper` an optimistic one that says whether trying the drafter could be
    worth it (equal to `rates` for drafters that learn without being drafted)."""

    rates: list[float]
    upper: list[float]
    catch_up: int = 0  # tokens the drafter must process before it can draft (a draft model that lags)
    mean: list[float] | None = None  # the plain estimate, to rank drafters that pass on `rates` (None: rates)
    proven: int | None = None  # positions the drafter vouches for; beyond them only where a batch is cheap
    # It has not read this reply's prompt: auto charges that reading in full before the first token, a share after.
    cold: bool = False


NO_OFFER = Offer([], [])


@dataclass(frozen=True)
class Outcome:
    """One verified round as every drafter learns from it."""

    at: int  # length of the text before the round
    draft: Draft  # what was verified (empty: the target alone)
    accepted: int
    produced: list[int]  # the tokens the target kept: accepted drafts + its own
    verify_s: float
    # The first token, read off the prompt's prefill: no verify batch was run, so its time says nothing of costs.
    prefilled: bool = False


class Drafter(Protocol):
    name: str  # the mode it implements; also the `source` of the rounds it drafts
    uses_model: bool  # its tokens cost draft-model steps (else lookups, nearly free)

    def reset(self) -> None:
        """Forget every earlier text (a new conversation, or a bench run that must start cold)."""
        ...

    def prefill(self, context: Sequence[int]) -> None:
        """A reply begins: the cheap part of warming up on its prompt (a lookup indexes it)."""
        ...

    def warm(self, context: Sequence[int]) -> None:
        """After the first token, which the target gives alone: the costly part of warming up (a draft
        model evaluates the prompt), so that it never delays the first token, as in llama-server. Its
        time counts as drafting: the user waits for the next token meanwhile."""
        ...

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        """Confidence in up to k_max next tokens, without drafting them (NO_OFFER: nothing to propose)."""
        ...

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens that are likely to follow `context`."""
        ...

    def learn(self, outcome: Outcome) -> None:
        """After every round, also one this drafter did not draft."""
        ...
