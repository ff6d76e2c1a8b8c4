"""Deterministic fake language models and drafters for the pure-logic tests of the speculative loop.

A fake's logits at a position are a pure function of the WHOLE context up to and including that
position (a hash of the token tuple seeds the row), so a KV-cache bug (a missing token, a stale
rejected token, a wrong rollback) changes the logits and therefore the output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from specchat.drafters import Draft, DraftModelDrafter, Offer, Outcome
from specchat.sampling import Sampler

EOG = 1  # the end-of-generation id of every fake
LOW = -20.0  # a logit that never wins


@lru_cache(maxsize=200_000)
def hash_row(context: tuple[int, ...], n_vocab: int, salt: int = 0) -> np.ndarray:
    """A reproducible standard-normal row seeded by the full context (read-only)."""
    data = np.asarray(context, dtype=np.int64).tobytes() + salt.to_bytes(8, "little")
    seed = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    row = np.random.default_rng(seed).standard_normal(n_vocab)
    row.flags.writeable = False
    return row


def greedy_next(logits_fn: Callable[[tuple[int, ...]], np.ndarray], context: Sequence[int]) -> int:
    return int(np.argmax(logits_fn(tuple(context))))


def wrong_token(row: np.ndarray, eog: int = EOG) -> int:
    """A token that is not the arg-max of `row` and not end-of-generation."""
    token = (int(np.argmax(row)) + 1) % len(row)
    if token == eog:
        token = (token + 1) % len(row)
    return token


class Clock:
    """Virtual seconds for the loop's timings, advanced by whoever models the costs (`clock.t += seconds`)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass(frozen=True)
class HashLM:
    """Target logits: a hash of the full context; EOG never wins except after the lengths in eog_at."""

    n_vocab: int = 32
    salt: int = 0
    eog_at: frozenset[int] = frozenset()  # context lengths whose next token is EOG

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        row = hash_row(context, self.n_vocab, self.salt).copy()
        row[EOG] = LOW
        if len(context) in self.eog_at:
            row[EOG] = row.max() + 3.0
        return row


@dataclass
class DraftLM:
    """Draft logits derived from a target's: agree or disagree with its arg-max by a rule.

    agree(context) -> bool decides per position; round_start (set by RecordingDrafter) lets a rule
    depend on the depth inside the current round.
    """

    target: Callable[[tuple[int, ...]], np.ndarray]
    agree: Callable[[DraftLM, tuple[int, ...]], bool] = lambda lm, ctx: True
    n_vocab: int | None = None  # None: the target's; bigger: padded with LOW
    foreign_at: frozenset[int] = frozenset()  # context lengths where a foreign id (>= target vocab) wins
    eog_at: frozenset[int] | None = None  # None: inherit the target's EOG behaviour
    round_start: int = 0

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        row = np.array(self.target(context), dtype=np.float64)
        if self.eog_at is not None:
            row[EOG] = row.max() + 3.0 if len(context) in self.eog_at else LOW
        if not self.agree(self, context):
            row[wrong_token(row)] = row.max() + 1.0
        if self.n_vocab is not None and self.n_vocab > len(row):
            row = np.concatenate([row, np.full(self.n_vocab - len(row), LOW)])
        if len(context) in self.foreign_at:
            row[len(row) - 2] = row.max() + 1.0
        return row


def agree_always(lm: DraftLM, ctx: tuple[int, ...]) -> bool:
    return True


def agree_never(lm: DraftLM, ctx: tuple[int, ...]) -> bool:
    return False


def agree_first(m: int) -> Callable[[DraftLM, tuple[int, ...]], bool]:
    """Agree for the first m positions of each round, then disagree."""
    return lambda lm, ctx: len(ctx) - lm.round_start < m


def agree_hashed(fraction: float, salt: int = 7) -> Callable[[DraftLM, tuple[int, ...]], bool]:
    """Agree on a context-determined pseudo-random `fraction` of positions."""
    from scipy.stats import norm

    threshold = float(norm.ppf(fraction))
    return lambda lm, ctx: hash_row(ctx, 1, salt)[0] < threshold


@dataclass
class EvalCall:
    kv_before: list[int]
    tokens: list[int]
    n_logits: int


@dataclass
class FakeModel:
    """A LanguageModel whose KV cache is a list of tokens; it records every eval and truncate."""

    logits_fn: Callable[[tuple[int, ...]], np.ndarray]
    n_vocab: int = 32
    n_ctx: int = 512
    interrupt_on_call: int | None = None  # 1-based eval call that raises KeyboardInterrupt
    interrupt_after_append: int = 0  # how many of that call's tokens reach the cache before it raises
    kv: list[int] = field(default_factory=list)
    calls: list[EvalCall] = field(default_factory=list)
    truncations: list[int] = field(default_factory=list)

    @property
    def n_past(self) -> int:
        return len(self.kv)

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        tokens = [int(t) for t in tokens]
        assert 0 <= n_logits <= len(tokens), f"n_logits={n_logits} for {len(tokens)} tokens"
        assert len(self.kv) + len(tokens) <= self.n_ctx, f"{len(self.kv)} + {len(tokens)} > n_ctx={self.n_ctx}"
        assert all(0 <= t < self.n_vocab for t in tokens), f"token outside the vocabulary: {tokens}"
        self.calls.append(EvalCall(list(self.kv), tokens, n_logits))
        if self.interrupt_on_call == len(self.calls):
            self.kv.extend(tokens[: self.interrupt_after_append])
            raise KeyboardInterrupt
        start = len(self.kv)
        self.kv.extend(tokens)
        first = len(tokens) - n_logits
        rows = [self.logits_fn(tuple(self.kv[: start + i + 1])) for i in range(first, len(tokens))]
        return np.array(rows, dtype=np.float32).reshape(n_logits, self.n_vocab)

    def truncate(self, n: int) -> None:
        assert n >= 0
        self.truncations.append(n)
        del self.kv[n:]

    def is_eog(self, token: int) -> bool:
        return token == EOG


def reference_greedy(
    logits_fn: Callable[[tuple[int, ...]], np.ndarray],
    prompt: Sequence[int],
    max_tokens: int,
    n_ctx: int | None = None,
) -> tuple[list[int], str]:
    """Plain greedy decoding straight from the logits function: no cache, no speculation."""
    context = list(prompt)
    out: list[int] = []
    while len(out) < max_tokens:
        if n_ctx is not None and len(context) >= n_ctx:
            return out, "context"
        token = greedy_next(logits_fn, context)
        if token == EOG:
            return out, "eog"
        out.append(token)
        context.append(token)
    return out, "max_tokens"


@dataclass
class Proposal:
    context: list[int]
    k: int
    tokens: list[int]
    draft_calls: list[EvalCall]


class RecordingDrafter:
    """DraftModelDrafter plus a record of every proposal and the draft-model evals it made."""

    uses_model = True

    def __init__(self, model: FakeModel, wait_for_first_token: bool = True) -> None:
        self.model = model
        self.inner = DraftModelDrafter(model, wait_for_first_token=wait_for_first_token)
        self.name = self.inner.name
        self.proposals: list[Proposal] = []
        self.feedbacks: list[tuple[int, int]] = []

    def reset(self) -> None:
        self.inner.reset()

    def prefill(self, context: Sequence[int]) -> None:
        self.inner.prefill(context)

    def warm(self, context: Sequence[int]) -> None:
        self.inner.warm(context)

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        return self.inner.offer(context, k_max)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        if isinstance(self.model.logits_fn, DraftLM):
            self.model.logits_fn.round_start = len(context)
        n_calls = len(self.model.calls)
        draft = self.inner.propose(context, k, sampler)
        self.proposals.append(Proposal(list(context), k, list(draft.tokens), self.model.calls[n_calls:]))
        return draft

    def learn(self, outcome: Outcome) -> None:
        assert outcome.verify_s >= 0.0
        self.feedbacks.append((len(outcome.draft), outcome.accepted))
        self.inner.learn(outcome)


def chisquare_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of `counts` to `probs`; cells expected below min_expected are pooled.

    A count in a cell of probability zero is an outright failure (p-value 0).
    """
    from scipy.stats import chisquare

    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    probs = probs / probs.sum()
    if np.any(counts[probs == 0.0] > 0):
        return 0.0
    expected = probs * counts.sum()
    big = expected >= min_expected
    obs = list(counts[big])
    exp = list(expected[big])
    if expected[~big].sum() > 0:
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    return float(chisquare(obs, exp).pvalue)
