"""auto's safeguards, kept apart from its choice: the guard that sets a drafter aside while its rounds really
run slower than the target alone (measured time, not the cost model), and the exploration budget that pays
for trying a drafter whose offer only pays optimistically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXPLORE_SHARE = 0.03  # exploration may cost at most this share of the reply's time
GUARD_DECAY = 0.9  # per round of that drafter: recent rounds decide
GUARD_ROUNDS = 2.0  # rounds of evidence before realized speed can set a drafter aside
GUARD_MARGIN = 0.97  # realized speed below this share of the target alone's: set aside
SET_ASIDE_ROUNDS = 16  # ... for this many rounds, doubled each time it happens again
# ... but only for this many rounds, every time, where it learns from every offer (a lookup) and its rounds
# took no more than COST_SLACK over what the cost model said: then the costs held and its copies broke,
# which its odds learn anyway; the pause only stops a run of breaks (a rename that breaks every few tokens).
LOOKUP_ASIDE_ROUNDS = 4
COST_SLACK = 1.25
REFERENCE_EVERY = 32  # rounds: the target alone runs at least this often, so the guard measures it


@dataclass
class Realized:
    """Recent rounds of one source: tokens produced and seconds spent, older rounds fading."""

    tokens: float = 0.0
    seconds: float = 0.0
    weight: float = 0.0
    predicted: float = 0.0  # seconds the cost model said those rounds would take

    def add(self, tokens: int, seconds: float, predicted: float = 0.0) -> None:
        self.tokens = self.tokens * GUARD_DECAY + tokens
        self.seconds = self.seconds * GUARD_DECAY + seconds
        self.weight = self.weight * GUARD_DECAY + 1
        self.predicted = self.predicted * GUARD_DECAY + predicted

    def as_predicted(self) -> bool:
        """Took no longer than the cost model said, within COST_SLACK."""
        return 0 < self.seconds <= COST_SLACK * self.predicted

    def step_s(self, evidence: float = GUARD_ROUNDS) -> float | None:
        """Seconds per token, once there is evidence."""
        return self.seconds / self.tokens if self.weight >= evidence and self.tokens > 0 else None


@dataclass
class Guard:
    """Sets a drafter aside when its rounds really ran slower than the target alone: measured time, not
    the model, so wrong costs or a wrong acceptance estimate cannot keep a losing drafter on."""

    realized: dict[str, Realized] = field(default_factory=dict)
    aside_until: dict[str, int] = field(default_factory=dict)
    times_aside: dict[str, int] = field(default_factory=dict)
    round: int = 0
    last_target_round: int = 0

    def allowed(self, name: str) -> bool:
        """May be tried: not (or no longer) set aside."""
        return self.round >= self.aside_until.get(name, 0)

    def trusted(self, name: str) -> bool:
        """May be chosen on its estimates: never set aside, or won a round since it came back (until
        then it returns only as a trial, which the exploration budget pays for)."""
        if not self.times_aside.get(name):
            return self.allowed(name)
        mine = self.realized.get(name, Realized()).step_s(evidence=1.0)
        reference = self.realized.get("target", Realized()).step_s(evidence=1.0)
        return self.allowed(name) and mine is not None and reference is not None and mine <= reference

    def needs_reference(self) -> bool:
        """Time to run the target alone once: without it the guard would judge against a stale number, and
        after a round with none yet (a reply's first token, read off the prefill, times no step) against the
        cost model's own, which a wrong calibration skews."""
        unmeasured = self.round > 0 and "target" not in self.realized
        return unmeasured or self.round - self.last_target_round >= REFERENCE_EVERY

    def untimed(self) -> None:
        """A round with no batch to time: the first token, read off the prefill."""
        self.round += 1

    def record(
        self, source: str, tokens: int, seconds: float, target_step_s: float, predicted: float = 0.0, lookup=False
    ) -> None:
        """One round of `source`: `predicted` is what the cost model said it would take; `lookup`, that the
        source learns from every offer, drafted or not (its losses teach its odds without a verdict)."""
        self.round += 1
        self.realized.setdefault(source, Realized()).add(tokens, seconds, predicted)
        if source == "target":
            self.last_target_round = self.round
            return
        # The target alone's speed as measured in recent target rounds; before any, the online estimate.
        reference = self.realized.get("target", Realized()).step_s(evidence=1.0) or target_step_s
        if tokens and seconds / tokens <= reference:
            # This round beat the target alone: judged now, older losses would set aside a drafter
            # that is winning again (a copy that broke twice, then holds for 16 tokens).
            return
        mine = self.realized[source].step_s()
        if mine is not None and reference > 0 and reference < GUARD_MARGIN * mine:
            count = self.times_aside.get(source, 0)
            held = lookup and self.realized[source].as_predicted()
            self.aside_until[source] = self.round + (LOOKUP_ASIDE_ROUNDS if held else SET_ASIDE_ROUNDS * 2**count)
            self.times_aside[source] = count + 1
            self.realized[source] = Realized()  # judged afresh when it comes back


EXPLORE_FLOOR = 1.0  # target steps a reply may spend on trials before it earned any: a first short trial


@dataclass
class Budget:
    """Exploration spending of one reply, in target steps: a share of the time so far, plus a start so that a
    reply's first rounds can afford a short trial. The start is what the replies before left unspent, at most
    EXPLORE_FLOOR (the first reply's is all of it): a fresh step for every reply let an editor's completions of
    ~20 tokens each pay one or two trials of ~0.9 steps, up to 8% of every one (/infill on an Intel Xeon,
    2026-12-06), where over a session trials now cost EXPLORE_SHARE of its time and one step."""

    spent: float = 0.0
    elapsed: float = 0.0
    start: float = EXPLORE_FLOOR

    def left(self) -> float:
        return EXPLORE_SHARE * self.elapsed + self.start - self.spent

    def next_reply(self) -> Budget:
        """The budget of the reply after this one: what this one left unspent carried over, never a debt (a trial
        that cost more than it was allowed is paid for by the next reply's own time, not by many replies')."""
        return Budget(start=min(EXPLORE_FLOOR, max(0.0, self.left())))
