"""Speculative decoding: the whole algorithm, independent of llama.cpp.

Each round: the drafter proposes up to k tokens; the target scores the pending token plus all of them in
ONE batch; the verifier keeps the longest acceptable prefix and adds the target's own token (the
correction at the first rejection, or the bonus token when every draft token was accepted). With k = 0
the same loop is plain target-only decoding, so both paths share every line but the draft.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .drafters.base import Draft, Drafter, Outcome
from .errors import ContextFullError
from .models_api import CachedModel, LanguageModel
from .sampling import Sampler


@dataclass(frozen=True)
class Round:
    """One draft-and-verify round, as the view and the bench see it."""

    index: int
    drafted: list[int]
    accepted: int  # how many of `drafted` the target kept
    token: int  # the target's own token: a correction, or the bonus after a full acceptance
    emitted: list[int]  # tokens appended to the text (accepted drafts + token, cut before end-of-generation)
    draft_s: float
    verify_s: float
    source: str = "target"  # the mode whose drafter drafted ("spec", "ngram"), or "target" (no draft)

    @property
    def accepted_tokens(self) -> list[int]:
        return self.drafted[: self.accepted]

    @property
    def rejected_tokens(self) -> list[int]:
        return self.drafted[self.accepted :]

    @property
    def bonus(self) -> bool:
        return bool(self.drafted) and self.accepted == len(self.drafted)


def position_acceptance(drafted_at: Sequence[int], accepted_at: Sequence[int]) -> list[float | None]:
    """Per draft position, accepted / drafted as reports give it (a reply's, a bench row's pooled counts): 4
    decimals, None (JSON null) where nothing was drafted, up to the last position drafted (auto is allowed 64: a
    reply that drafted none carried 64 nulls). A None before that stays, so that entry i is still position i + 1."""
    rates = [round(a / d, 4) if d else None for a, d in zip(accepted_at, drafted_at, strict=True)]
    while rates and rates[-1] is None:
        rates.pop()
    return rates


@dataclass
class Stats:
    """What a generation did and cost. Times are wall-clock seconds."""

    prompt_tokens: int = 0
    generated: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_s: float = 0.0  # before the first token: the target's, and a draft model's where auto had it read then
    # Tokens read off a prefill's last row (each reply's first): in `generated`, but their time is the prefill's.
    prefilled: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    first_token_s: float = 0.0  # from start to the first generated token (includes prefill)
    stop_reason: str = ""  # eog | max_tokens | context | interrupted
    drafted_at: list[int] = field(default_factory=list)  # per draft position 1..k
    accepted_at: list[int] = field(default_factory=list)
    rounds_by_source: dict[str, int] = field(default_factory=dict)  # "target", "spec", "ngram", ...

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / drafted tokens."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Draft tokens accepted per round, NOT counting the target's own (correction or bonus) token."""
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens gained per target pass, counting the target's own token (1.0 = no gain)."""
        return self.generated / self.rounds if self.rounds else 0.0

    @property
    def decode_s(self) -> float:
        return max(self.total_s - self.prefill_s, 0.0)

    @property
    def tokens_per_s(self) -> float:
        """Tokens after the first / the time after it: the first is read off the prefill, in prefill_s and the
        time to first token (counted here with no time of its own, a reply's first round read 50,000 tok/s)."""
        return (self.generated - self.prefilled) / self.decode_s if self.decode_s > 0 else 0.0

    def record(
        self, drafted: int, accepted: int, emitted: int, draft_s: float, verify_s: float, source: str = "target"
    ) -> None:
        """Add one round: the only place where rounds are counted."""
        self.rounds += 1
        self.rounds_by_source[source] = self.rounds_by_source.get(source, 0) + 1
        self.generated += emitted
        self.drafted += drafted
        self.accepted += accepted
        self.draft_s += draft_s
        self.verify_s += verify_s
        self._grow(drafted)
        for i in range(drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < accepted

    def merge(self, other: Stats) -> None:
        """Add another generation's rounds (session totals, tuning over a suite)."""
        counts = ("generated", "prefilled", "rounds", "drafted", "accepted")
        for name in (*counts, "draft_s", "verify_s", "total_s", "prefill_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self._grow(len(other.drafted_at))
        for i, (drafted, accepted) in enumerate(zip(other.drafted_at, other.accepted_at, strict=True)):
            self.drafted_at[i] += drafted
            self.accepted_at[i] += accepted
        for source, count in other.rounds_by_source.items():
            self.rounds_by_source[source] = self.rounds_by_source.get(source, 0) + count

    def _grow(self, positions: int) -> None:
        while len(self.drafted_at) < positions:
            self.drafted_at.append(0)
            self.accepted_at.append(0)

    def position_rates(self) -> list[float | None]:
        """Acceptance rate at draft position i (1-based in the UI), among rounds that drafted position i;
        None where no round did (auto may choose k up to 64 and draft far less: not 0%, not measured)."""
        return [a / d if d else None for a, d in zip(self.accepted_at, self.drafted_at, strict=True)]

    def position_acceptance(self) -> list[float | None]:
        return position_acceptance(self.drafted_at, self.accepted_at)

    def acceptance(self) -> dict:
        """acceptance_rate and mean_accepted_length as the JSON reports give them (run, the log, serve): 4
        decimals, None (JSON null) where nothing was drafted, as the bench's rows: not measured, where 0.0 read
        as a drafter that was always wrong."""
        if not self.drafted:
            return {"acceptance_rate": None, "mean_accepted_length": None}
        return {"acceptance_rate": round(self.acceptance_rate, 4), "mean_accepted_length": round(self.mean_accepted, 4)}

    def as_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            **self.acceptance(),
            "mean_accepted_length_counts_bonus": False,
            "tokens_per_round": round(self.tokens_per_round, 4),
            "prefill_s": round(self.prefill_s, 4),
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "total_s": round(self.total_s, 4),
            "time_to_first_token_s": round(self.first_token_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "stop_reason": self.stop_reason,
            "position_acceptance": self.position_acceptance(),
            "rounds_by_source": dict(self.rounds_by_source),
        }


def speculative_decode(
    target: CachedModel | LanguageModel,
    drafter: Drafter | None,
    prompt: Sequence[int],
    sampler: Sampler,
    *,
    k: int,
    max_tokens: int,
    on_round: Callable[[Round, Stats], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[int], Stats]:
    """Generate up to max_tokens after `prompt`; returns (new tokens, stats). k = 0 or no drafter: target alone.

    on_round(round, stats) streams every round with the statistics so far; `clock` is injectable so
    that a simulator can replay the loop on a virtual clock."""
    if not isinstance(target, CachedModel):
        target = CachedModel(target)
    n_ctx = target.model.n_ctx
    check_fits(len(prompt), n_ctx)
    if not prompt:
        raise ValueError("speculative_decode needs at least one prompt token")
    stats = Stats(prompt_tokens=len(prompt))
    tokens = list(prompt)
    k = k if drafter is not None else 0
    stats.drafted_at = [0] * k
    stats.accepted_at = [0] * k
    start = clock()
    try:
        # Prefill the whole prompt: the first round reads the first token off its last row (CachedModel keeps
        # it), as llama.cpp's own generation does, so both split the work alike. The last prompt token used to
        # open the first verify batch; on the Xeon the first token came as soon either way (2026-12-06,
        # docs/bench.md: the prefill's extra row costs about the step it saves there).
        target.feed(tokens, 1)
        if drafter is not None and k > 0:
            drafter.prefill(tokens[:-1])
        stats.prefill_s = clock() - start
        while True:
            remaining = max_tokens - stats.generated
            room = n_ctx - len(tokens)  # target's cache after verify: len(tokens) + k_round <= n_ctx
            if remaining <= 0:
                stats.stop_reason = "max_tokens"
                break
            if room <= 0:
                stats.stop_reason = "context"
                break
            # A round emits at most k_round + 1 tokens; keep the text within n_ctx, as target alone does.
            k_round = max(0, min(k, remaining - 1, room - 1))
            warm_s = 0.0
            if stats.rounds == 1 and k_round and drafter is not None:
                # The first token is out: now what must not delay it (a draft model's prefill). The user
                # waits for the next token meanwhile, so it is drafting's time, not prefill's: booked as
                # prefill, it was left out of tokens/s and of the time to first token alike, and a draft
                # model read for nothing (auto then drafting little with it) looked free.
                warm_start = clock()
                drafter.warm(tokens)
                warm_s = clock() - warm_start  # this round's drafting: the rounds' times add up to the reply's
            t0 = clock()
            draft = drafter.propose(tokens, k_round, sampler) if k_round and drafter else Draft()
            _drop_foreign_ids(draft, target.model.n_vocab)
            t1 = clock()
            draft_s = t1 - t0 - draft.prefill_s + warm_s  # less a cold draft model's reading before the first token
            stats.prefill_s += draft.prefill_s
            prefilled = target.holds_row(tokens)
            logits = target.feed([*tokens, *draft.tokens], len(draft) + 1)
            n_accepted, token = sampler.verify(draft.tokens, draft.q, logits, draft.rejected_q)
            t2 = clock()
            produced = [*draft.tokens[:n_accepted], token]
            if drafter is not None:
                drafter.learn(Outcome(len(tokens), draft, n_accepted, produced, t2 - t1, prefilled))
            emitted, ended = _cut_at_eog(target.model, produced)
            tokens.extend(emitted)
            source = (draft.source or "draft") if len(draft) else "target"
            stats.record(len(draft), n_accepted, len(emitted), draft_s, t2 - t1, source)
            stats.prefilled += prefilled and bool(emitted)
            stats.total_s = t2 - start  # so far: the live footer's tok/s is the reply's own, as under it at the end
            if stats.rounds == 1:
                stats.first_token_s = t2 - start
            if on_round is not None:
                on_round(Round(stats.rounds, draft.tokens, n_accepted, token, emitted, draft_s, t2 - t1, source), stats)
            if ended:
                stats.stop_reason = "eog"
                break
    except KeyboardInterrupt:
        stats.stop_reason = "interrupted"
    stats.total_s = clock() - start
    return tokens[len(prompt) :], stats


def check_fits(prompt_tokens: int, n_ctx: int) -> None:
    """ContextFullError unless a prompt of this many tokens leaves room for a reply in the context."""
    if prompt_tokens >= n_ctx:
        raise ContextFullError(
            # said for a prompt that fills the context exactly too ("256 tokens but the context holds 256"
            # read as a contradiction): the reply needs at least one place of its own
            f"the prompt has {prompt_tokens} tokens and the context holds {n_ctx}: no room is left for a reply",
            hint="shorten the prompt or raise --ctx",
        )


def _drop_foreign_ids(draft: Draft, n_vocab: int) -> None:
    """A draft id the target's vocabulary lacks can never be accepted and is invalid input to it."""
    for i, token in enumerate(draft.tokens):
        if not 0 <= token < n_vocab:
            draft.rejected_q = draft.q[i]
            del draft.tokens[i:], draft.q[i:]
            return


def _cut_at_eog(model: LanguageModel, new: list[int]) -> tuple[list[int], bool]:
    for i, token in enumerate(new):
        if model.is_eog(token):
            return new[:i], True
    return new, False
