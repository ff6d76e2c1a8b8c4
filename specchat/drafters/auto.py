"""auto: every round, the drafter and draft length that maximise the expected speed, where the target
alone (k = 0) is always a candidate, so auto never drafts unless the numbers say it pays.

Each drafter offers its confidence per position (drafters.base.Offer); the cost model turns that into
a speedup S(k) = E(k) / (k step + v(k + 1)) over measured batch sizes. Three rules keep auto from
losing by much on any machine (the last two kept in autoguard.py):
- a drafter is used only where its CAUTIOUS acceptance estimate (below the mean) promises a gain;
  among those, the plain estimates rank them;
- a drafter whose offer only pays optimistically is tried within an exploration budget, a few percent of
  the time (a reply's; over serve's and chat's replies, the session's), so trying cannot cost more than that;
- a drafter whose rounds really ran slower than the target alone (measured time, not the model) is set
  aside for a while, longer each time, whatever its estimates say: costs can be wrong, clocks are not.
  It is judged after a round that lost, never after one that won; a lookup whose rounds took what the
  cost model said is set aside for 4 rounds only (the costs held, its copies broke, and its odds learn
  that anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..costmodel import LOOKUP_STEP, Costs
from ..modes import MODES
from ..sampling import Sampler
from .autoguard import Budget, Guard
from .base import Draft, Drafter, Offer, Outcome

EXPLORE_MAX_K = 4  # exploration drafts short: it is for learning, not for winning
CATCH_UP_SHARED = 4  # a draft model's catch-up is charged to this many of the rounds it then drafts
# ... and its first reading of the prompt to this many: read once, it serves the whole reply after it
PROMPT_READ_SHARED = 16
CHEAP_GROWTH = 1.2  # beyond what a drafter vouches for: only batches costing at most this much more


@dataclass(frozen=True)
class Choice:
    source: str  # a drafter's name, or "target"
    k: int
    speedup: float  # predicted, over the target alone
    reason: str
    fixed: float = 0.0  # target steps of work before drafting (a lagging draft model's catch-up)
    explore: bool = False
    ahead: tuple[float, ...] = ()  # per position, the estimate the choice was made on (a model's stop reads it)


@dataclass
class AutoDrafter:
    costs: Costs
    drafters: Sequence[Drafter]
    clock: Callable[[], float] = time.perf_counter
    name: str = "auto"
    uses_model: bool = False
    last: Choice = field(default_factory=lambda: Choice("target", 0, 1.0, "no round yet"))

    def __post_init__(self) -> None:
        self.guard = Guard()
        self.budget = Budget()
        self._first_out = False  # the reply's first token is out (warm)
        self._k_max = MODES["auto"].max_k  # the longest draft the run allows (`-k`), as the last round asked
        self._draft_s = self._catch_up_s = 0.0
        self._source, self._explore = "target", False  # of the round being drafted

    def reset(self) -> None:
        for drafter in self.drafters:
            drafter.reset()
        self.guard = Guard()
        self.budget = Budget()

    def prefill(self, context: Sequence[int]) -> None:
        for drafter in self.drafters:
            drafter.prefill(context)
        self.budget = self.budget.next_reply()  # serve's and chat's replies share one; reset() starts afresh
        self._first_out = False

    def warm(self, context: Sequence[int]) -> None:
        # A draft model reads the prompt now only where drafting with it alone pays on its plain estimate,
        # that reading counted (a share: it serves the rest of the reply); else only once auto chooses it.
        # Read at once whatever it costs, as spec mode must, a reply that then never drafted with it (on a
        # Xeon-like CPU only some code pays) waited for it all the same: a fifth of a reply on a long
        # prompt. Read only when chosen, a draft model that pays on its own (a desktop CPU) stayed unread:
        # its cautious estimate, before it ever drafted, rarely pays, and unread it never learned better.
        self._first_out = True
        for drafter in self.drafters:
            if not drafter.uses_model or self._pays_alone(drafter, context):
                drafter.warm(context)

    def _pays_alone(self, drafter: Drafter, context: Sequence[int]) -> bool:
        """Drafting with it alone is expected to pay (the plain estimate), its catch-up counted, on drafts as long
        as the run allows (`-k 1`: a reading that only longer drafts repay is not worth it)."""
        priced = self._priced_offer(drafter, context, self._k_max)
        if priced is None or not self.guard.trusted(drafter.name):
            return False
        offer, step, fixed = priced
        k, _ = self.costs.best_length(offer.mean or offer.rates, step, fixed)
        return k > 0

    def _priced_offer(self, drafter: Drafter, context: Sequence[int], k_max: int) -> tuple[Offer, float, float] | None:
        """The drafter's offer within reach, what a draft step of it costs and the share of its catch-up a round is
        charged (target steps); None where it cannot draft (no measured step, nothing to offer)."""
        step = self._step_cost(drafter)
        if step is None:
            return None
        offer = self._within_reach(drafter.offer(context, min(k_max, MODES[drafter.name].max_k)), drafter.name)
        if not offer.rates:
            return None
        return offer, step, self._catch_up_cost(drafter, offer)

    def offer(self, context: Sequence[int], k_max: int):
        raise NotImplementedError("auto combines offers; it does not make one")

    def _step_cost(self, drafter: Drafter) -> float | None:
        return self.costs.draft_step if drafter.uses_model else LOOKUP_STEP

    def _catch_up_cost(self, drafter: Drafter, offer: Offer, shared: bool = True) -> float:
        """A lagging draft model first evaluates what it missed, in one batch: c x v(tokens) target steps
        (the target's batch curve stands in for the draft's). Once caught up it serves the rounds after
        too, so a round is charged a share of it (of its first reading of the prompt, a smaller share: it
        serves the whole reply); a trial, which may not be followed by more, all of it (see _trial), and
        so is the prompt before the first token, where the whole cost delays that token."""
        if not offer.catch_up or not drafter.uses_model:
            return 0.0
        full = (self.costs.draft_step or 0.0) * self.costs.v(offer.catch_up)
        if not shared or (offer.cold and not self._first_out):
            return full
        return full / (PROMPT_READ_SHARED if offer.cold else CATCH_UP_SHARED)

    def choose(self, context: Sequence[int], k_max: int) -> Choice:
        """The best choice for this round (no side effects beyond the drafters' remembered offers)."""
        best = Choice("target", 0, 1.0, "drafting would not pay")
        candidates = []
        for drafter in self.drafters:
            priced = self._priced_offer(drafter, context, k_max)
            if priced is None:
                continue
            offer, step, fixed = priced
            candidates.append((drafter, offer, step, fixed))
            # Ranked by the plain estimate, taken only where the cautious one promises a gain too (else the
            # length that pays most on the cautious one, judged by that: Costs.best_length).
            k, speedup = self.costs.best_length(offer.mean or offer.rates, step, fixed, cautious=offer.rates)
            if k and speedup > best.speedup and self.guard.trusted(drafter.name):
                best = Choice(
                    drafter.name, k, speedup, f"{drafter.name} pays", fixed, ahead=tuple(offer.mean or offer.rates)
                )
        trial: Choice | None = None
        for drafter, offer, step, fixed in candidates:
            if drafter.name == best.source:  # the chosen drafter learns from its own rounds anyway
                continue
            if self.guard.allowed(drafter.name) and (
                offer.upper != offer.rates or not self.guard.trusted(drafter.name)
            ):
                trial = self._trial(drafter, offer, step, fixed, trial, best)
        if trial is not None:
            return trial
        if best.k and self.guard.needs_reference():
            return Choice("target", 0, 1.0, "timing the target alone (the guard's reference)")
        return best

    def _within_reach(self, offer: Offer, name: str) -> Offer:
        """The offer cut to what its drafter vouches for, or to the longest batch that costs little more
        than that (on a GPU a batch of 64 costs about what one of 8 does; on a CPU several times more),
        while the machine runs as calibrated and the drafter has not lost time yet."""
        if offer.proven is None or offer.proven >= len(offer.rates):
            return offer
        if not self.costs.steady or self.guard.times_aside.get(name):  # the costs are in doubt
            return replace(
                offer,
                rates=offer.rates[: offer.proven],
                upper=offer.upper[: offer.proven],
                mean=offer.mean[: offer.proven] if offer.mean else None,
            )
        budget = CHEAP_GROWTH * self.costs.v(offer.proven + 1)
        reach = max([offer.proven] + [n - 1 for n in self.costs.verify if self.costs.v(n) <= budget])
        cut = min(reach, len(offer.rates))
        mean = offer.mean[:cut] if offer.mean is not None else None
        return replace(offer, rates=offer.rates[:cut], upper=offer.upper[:cut], mean=mean)

    def _trial(self, drafter: Drafter, offer, step: float, fixed: float, trial, best: Choice) -> Choice | None:
        """A short draft worth trying (optimistically it beats the best choice) that the exploration
        budget affords; else the trial found so far."""
        hopes = self.costs.speedup(offer.upper[:EXPLORE_MAX_K], step, fixed)
        bar = max(1.0, best.speedup)
        catch_up = self._catch_up_cost(drafter, offer, shared=False)
        for k, hope in enumerate(hopes):
            affordable = catch_up + k * step + self.costs.v(k + 1) - 1.0 <= self.budget.left()
            if k and affordable and self.costs.measured(k + 1) and hope > max(bar, trial.speedup if trial else 0):
                trial = Choice(drafter.name, k, hope, f"trying {drafter.name}", fixed, True, tuple(offer.upper))
        return trial

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        self._k_max = k
        self.last = choice = self.choose(context, k)
        self._draft_s = self._catch_up_s = 0.0
        self._source, self._explore = "target", choice.explore
        drafter = next((d for d in self.drafters if d.name == choice.source), None)
        if drafter is None or choice.k == 0:
            return Draft()
        started = self.clock()
        cold = getattr(drafter, "cold", False)
        catch_up = getattr(drafter, "catch_up", None)
        if catch_up is not None:
            catch_up(context)  # timed apart: catching up is not what a draft step costs
        drafting = self.clock()
        if drafter.uses_model:  # it stops where its own confidence says the rest would not pay
            draft = drafter.propose(context, choice.k, sampler, stop=self._stop(drafter, choice))
        else:
            draft = drafter.propose(context, choice.k, sampler)
        self._draft_s, self._catch_up_s = self.clock() - started, drafting - started
        if cold and not self._first_out:  # it read the prompt before the first token (auto's choice): prefill
            draft.prefill_s = self._catch_up_s
        self._source = drafter.name if drafter.uses_model else "target"
        return draft

    def _stop(self, drafter: Drafter, choice: Choice) -> Callable[[list[float]], int | None]:
        step = self._step_cost(drafter) or 0.0
        return lambda chances: self.costs.draft_on(chances, choice.k, step, choice.fixed, choice.ahead)

    def learn(self, outcome: Outcome) -> None:
        # A first round reads the pending token's row off the prefill: its batch holds the draft alone.
        batch = len(outcome.draft) + (not outcome.prefilled)
        if batch:
            self._book(outcome, batch)
        else:  # no batch at all: a round of ~0 s would make the target alone look free to the guard
            for drafter in self.drafters:
                drafter.learn(outcome)
            self.guard.untimed()
        # A round the loop verifies without asking for a draft (the reply's last token) must not be
        # booked with this one's drafting.
        self._draft_s = self._catch_up_s = 0.0
        self._source, self._explore = "target", False

    def _book(self, outcome: Outcome, batch: int) -> None:
        """A timed round: its costs, what every drafter learns from it, the guard's verdict and the budget."""
        draft = outcome.draft
        predicted = (self.costs.v(batch) + self.last.fixed) * self.costs.step_s  # before observing
        self.costs.observe_verify(batch, outcome.verify_s, outcome.at)
        # A draft model that stopped before keeping any guess still drafted: its round is its own.
        source = draft.source if len(draft) else self._source
        used = next((d for d in self.drafters if d.name == source), None)  # None: the target alone
        if used is not None and used.uses_model:
            self.costs.observe_draft(getattr(used, "steps", len(draft)), self._draft_s - self._catch_up_s)
        for drafter in self.drafters:
            drafter.learn(outcome)
        seconds = self._draft_s + outcome.verify_s
        lookup = used is not None and not used.uses_model
        gained = len(outcome.produced) - outcome.prefilled  # the prefill's token came without this round's time
        self.guard.record(source, gained, seconds, self.costs.step_s, predicted, lookup)
        steps = seconds / self.costs.step_s if self.costs.step_s > 0 else 1.0
        self.budget.elapsed += steps
        if self._explore:
            self.budget.spent += max(0.0, steps - gained)
