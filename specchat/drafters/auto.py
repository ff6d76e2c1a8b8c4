"""auto: every round, the drafter and draft length that maximise the expected speed, where the target
alone (k = 0) is always a candidate, so auto never drafts unless the numbers say it pays.

Each drafter offers its confidence per position (drafters.base.Offer); the cost model turns that into
a speedup S(k) = E(k) / (k step + v(k + 1)) over measured batch sizes. Three rules keep auto from
losing by much on any machine:
- decisions use CAUTIOUS acceptance estimates (a standard error below the mean);
- a drafter whose offer only pays optimistically is tried within an exploration budget, a few percent of
  the reply's time, so trying cannot cost more than that;
- a drafter whose rounds really ran slower than the target alone (measured time, not the model) is set
  aside until its evidence fades, whatever its estimates say: costs can be wrong, clocks are not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..costmodel import LOOKUP_STEP, Costs
from ..modes import MODES
from ..sampling import Sampler
from .base import Draft, Drafter, Outcome

EXPLORE_SHARE = 0.03  # exploration may cost at most this share of the reply's time
EXPLORE_MAX_K = 4  # exploration drafts short: it is for learning, not for winning
GUARD_DECAY = 0.97  # per round: a drafter set aside is tried again once its bad rounds fade
GUARD_WEIGHT = 2.0  # rounds of evidence before realized speed can set a drafter aside
GUARD_MARGIN = 0.97  # realized speed below this share of the target alone's: set aside


@dataclass(frozen=True)
class Choice:
    source: str  # a drafter's name, or "target"
    k: int
    speedup: float  # predicted, over the target alone
    reason: str
    explore: bool = False


@dataclass
class Realized:
    """Recent rounds of one drafter: tokens produced and seconds spent, old rounds fading."""

    tokens: float = 0.0
    seconds: float = 0.0
    weight: float = 0.0

    def fade(self) -> None:
        self.tokens, self.seconds, self.weight = (x * GUARD_DECAY for x in (self.tokens, self.seconds, self.weight))

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens, self.seconds, self.weight = self.tokens + tokens, self.seconds + seconds, self.weight + 1

    def losing(self, step_s: float) -> bool:
        """Slower than the target alone (one token per step_s) over enough recent rounds."""
        if self.weight < GUARD_WEIGHT or self.seconds <= 0 or step_s <= 0:
            return False
        return self.tokens * step_s / self.seconds < GUARD_MARGIN


@dataclass
class Budget:
    """Exploration spending of one reply, in target steps."""

    spent: float = 0.0
    elapsed: float = 0.0

    def allows(self, cost: float) -> bool:
        return self.spent + cost <= EXPLORE_SHARE * self.elapsed


@dataclass
class AutoDrafter:
    costs: Costs
    drafters: Sequence[Drafter]
    clock: Callable[[], float] = time.perf_counter
    name: str = "auto"
    uses_model: bool = False
    last: Choice = field(default_factory=lambda: Choice("target", 0, 1.0, "no round yet"))

    def __post_init__(self) -> None:
        self.realized = {d.name: Realized() for d in self.drafters}
        self.budget = Budget()
        self._draft_s = 0.0

    def reset(self) -> None:
        for drafter in self.drafters:
            drafter.reset()
        self.realized = {d.name: Realized() for d in self.drafters}
        self.budget = Budget()

    def prefill(self, context: Sequence[int]) -> None:
        for drafter in self.drafters:
            drafter.prefill(context)
        self.budget = Budget()

    def offer(self, context: Sequence[int], k_max: int):
        raise NotImplementedError("auto combines offers; it does not make one")

    def _step_cost(self, drafter: Drafter) -> float | None:
        return self.costs.draft_step if drafter.uses_model else LOOKUP_STEP

    def choose(self, context: Sequence[int], k_max: int) -> Choice:
        """The best choice for this round (no side effects beyond the drafters' remembered offers)."""
        best = Choice("target", 0, 1.0, "drafting would not pay")
        trial: Choice | None = None
        for drafter in self.drafters:
            step = self._step_cost(drafter)
            if step is None:
                continue
            offer = drafter.offer(context, min(k_max, MODES[drafter.name].max_k))
            if not offer.rates:
                continue
            k, speedup = self.costs.best_length(offer.rates, step)
            losing = self.realized[drafter.name].losing(self.costs.step_s)
            if k and speedup > best.speedup and not losing:
                best = Choice(drafter.name, k, speedup, f"{drafter.name} pays")
            if offer.upper != offer.rates or losing:
                k_try, hope = self.costs.best_length(offer.upper[:EXPLORE_MAX_K], step)
                if k_try and hope > 1.0 and (trial is None or hope > trial.speedup):
                    trial = Choice(drafter.name, k_try, hope, f"trying {drafter.name}", explore=True)
        if best.k == 0 and trial is not None and self.budget.allows(self._trial_cost(trial)):
            return trial
        return best

    def _trial_cost(self, choice: Choice) -> float:
        """What a trial may lose, in target steps: its whole cost minus the one token it surely yields."""
        drafter = next(d for d in self.drafters if d.name == choice.source)
        return choice.k * (self._step_cost(drafter) or 0.0) + self.costs.v(choice.k + 1) - 1.0

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self.last = choice = self.choose(context, k)
        self._draft_s = 0.0
        drafter = next((d for d in self.drafters if d.name == choice.source), None)
        if drafter is None or choice.k == 0:
            return Draft()
        catch_up = getattr(drafter, "catch_up", None)
        if catch_up is not None:
            catch_up(context)  # not part of what a draft step costs
        started = self.clock()
        draft = drafter.propose(context, choice.k, sampler)
        self._draft_s = self.clock() - started
        return draft

    def learn(self, outcome: Outcome) -> None:
        draft = outcome.draft
        self.costs.observe_verify(len(draft) + 1, outcome.verify_s)
        source = draft.source if len(draft) else "target"
        model_drafted = any(d.uses_model and d.name == source for d in self.drafters)
        if model_drafted:
            self.costs.observe_draft(len(draft), self._draft_s)
        for drafter in self.drafters:
            drafter.learn(outcome)
            self.realized[drafter.name].fade()
        if source in self.realized:
            self.realized[source].add(len(outcome.produced), self._draft_s + outcome.verify_s)
        steps = (self._draft_s + outcome.verify_s) / self.costs.step_s if self.costs.step_s > 0 else 1.0
        self.budget.elapsed += steps
        if self.last.explore:
            self.budget.spent += max(0.0, steps - len(outcome.produced))
