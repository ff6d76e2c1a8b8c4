"""Suffix drafting: continue the text the way it went on before, in this conversation or an earlier one.

After SuffixDecoding (Oliaro et al., NeurIPS 2025): find the earlier places whose text ends like the
current text (the longest suffix match, in the current conversation and in the user's past ones), and
propose what most of them went on with. Where they disagree, the majority token is taken and only the
matches that agree go on voting; the share that agreed is the confidence of that position, so a
passage the user has seen answered the same way several times is offered as a long, confident run,
and a one-off match is worth no more than prompt lookup's copy priors (drafters/copyodds.py).

Greedy-safe as every drafter: the guesses are deterministic (q = None), and the target checks each one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..sampling import Sampler
from ..tokenchains import LONGEST, ORDER, SEP, Chains, GrowingChains
from .base import NO_OFFER, Draft, Offer, Outcome
from .copyodds import CopyOdds, book
from .ngram import MAX_COPY, CopyRuns

PRIOR_WEIGHT = 4.0  # the copy prior for a match of this length counts as this many earlier matches
ECHO = 16  # tokens compared to tell a logged copy of this conversation from another match
VOUCH = 2  # positions on which at least this many earlier matches agree are vouched for (Offer.proven)
# A match found only in past conversations is judged as a copy that has matched at most this many tokens,
# whatever its length. Within one text a long match means a copy (an edit, a quote); across
# conversations the replies share long stock phrases ("Here is a Python function that ..."), and on
# six re-asked tasks (2026-12-01) auto lost 5-7% on three of them drafting such matches at in-text odds.
PAST_MATCH = 5


@dataclass(frozen=True)
class Guess:
    """The most frequent continuation: per position, how many matches reached it and how many of them
    went on with the proposed token (conditional: only matches that agreed so far vote)."""

    tokens: list[int]
    support: list[int]
    agree: list[int]
    matched: int  # tokens of the suffix matched (at most tokenchains.LONGEST)
    past: bool = False  # every deepest match is in a past conversation, none in this one


NO_GUESS = Guess([], [], [], 0)


def lookup(sources: Sequence[Chains], context: Sequence[int], k: int) -> Guess:
    """The deepest matches of the end of `context` in every source, and where most of them lead. The
    first source is the current conversation; the others (the history) may hold its earlier turns too."""
    if k <= 0:
        return NO_GUESS
    tail = np.asarray(context[-LONGEST:], dtype=np.int64)
    lengths, rows, origin = [], [], []
    for number, chains in enumerate(sources):
        found = chains.candidates(tail)
        if len(found):
            length = chains.lengths(found, tail)
            real = length >= ORDER  # the others are hash collisions
            lengths.append(length[real])
            rows.append(chains.continuations(found[real], k))
            origin.append(np.full(int(real.sum()), number))
    if not sum(map(len, lengths)):
        return NO_GUESS
    length, rows, origin = np.concatenate(lengths), np.concatenate(rows), np.concatenate(origin)
    deepest = length == length.max()
    rows, origin = rows[deepest], origin[deepest]
    kept = ~_echoes(rows, origin == 0)
    guess = _majority(rows[kept], k, int(length.max()))
    return replace(guess, past=not (origin[kept] == 0).any())


def _echoes(rows: np.ndarray, current: np.ndarray) -> np.ndarray:
    """History rows that are a logged copy of an earlier turn of this conversation (one per such turn),
    judged by their first ECHO tokens: that turn is already a match in the conversation, and must not
    vote twice. A logged copy ends with its message, so only its own tokens are compared."""
    echo = np.zeros(len(rows), dtype=bool)
    if current.all() or not current.any():
        return echo
    mine, past = rows[current, :ECHO], rows[~current, :ECHO]
    same = ((past[:, None, :] == mine[None, :, :]) | (past[:, None, :] == SEP)).all(axis=2)
    unused = np.ones(len(mine), dtype=bool)
    flags = np.zeros(len(past), dtype=bool)
    for i in np.flatnonzero(same.any(axis=1)):
        j = np.flatnonzero(same[i] & unused)
        if len(j):
            unused[j[0]], flags[i] = False, True
    echo[~current] = flags
    return echo


def _majority(rows: np.ndarray, k: int, matched: int) -> Guess:
    tokens: list[int] = []
    support: list[int] = []
    agree: list[int] = []
    i = 0
    while i < k:
        rows = rows[rows[:, i] != SEP]  # matches whose text ended here stop voting
        if not len(rows):
            break
        # Where all remaining matches agree, take the whole run at once (the common case).
        same = ((rows[:, i:] == rows[0, i:]) & (rows[0, i:] != SEP)).all(axis=0)
        run = int(np.logical_and.accumulate(same).sum())
        if run:
            tokens += rows[0, i : i + run].tolist()
            support += [len(rows)] * run
            agree += [len(rows)] * run
            i += run
            continue
        values, first, counts = np.unique(rows[:, i], return_index=True, return_counts=True)
        best = np.lexsort((first, -counts))[0]  # most votes; ties: the most recent match
        tokens.append(int(values[best]))
        support.append(len(rows))
        agree.append(int(counts[best]))
        rows = rows[rows[:, i] == values[best]]
        i += 1
    return Guess(tokens, support, agree, matched)


@dataclass(frozen=True)
class _Copy:
    guess: Guess
    at: int  # length of the text it continues


class SuffixDrafter:
    """Suffix matches in this conversation and (optionally) the history index, as a drafter."""

    name = "suffix"
    uses_model = False

    def __init__(self, history=None, ends_copy: Callable[[int], bool] | None = None) -> None:
        self.history = history  # history.History, or None: this conversation only
        # A copy ends before a control token: the chat template's markup is never proposed.
        self.ends_copy = ends_copy or (lambda _token: False)
        self.reset()

    def reset(self) -> None:
        self.conversation = GrowingChains()
        self._start_reply()

    def _start_reply(self) -> None:
        self.odds = CopyOdds()  # per reply, as prompt lookup's (see NgramDrafter._start_reply)
        self.past_odds = CopyOdds(longest=PAST_MATCH)  # of matches only in past conversations (PAST_MATCH)
        self._copy: _Copy | None = None
        self.runs = CopyRuns()

    def prefill(self, context: Sequence[int]) -> None:
        self._sync(context)
        if self.history is not None:
            self.history.update()  # what the log gained since the last reply (the previous reply, mostly)
        self._start_reply()

    def warm(self, context: Sequence[int]) -> None:
        pass  # the prompt was indexed in prefill: a lookup may draft the first round

    def _sync(self, context: Sequence[int]) -> None:
        """Index the text so far. A context that does not extend the indexed one (checked at both ends of
        the indexed part: a guess is all that rides on it) is another conversation."""
        chains, n_old = self.conversation, self.conversation.total
        edge = min(n_old, 16)
        if n_old and (
            len(context) < n_old
            or list(context[:edge]) != chains.tokens[:edge].tolist()
            or list(context[n_old - edge : n_old]) != chains.tokens[n_old - edge : n_old].tolist()
        ):
            chains = self.conversation = GrowingChains()
            n_old = 0
        if len(context) > n_old:
            chains.append(np.asarray(context[n_old:], dtype=np.int64))

    def sources(self) -> list[Chains]:
        history = self.history.chains if self.history is not None else None
        return [self.conversation] if history is None else [self.conversation, history]

    def _copy_at(self, context: Sequence[int]) -> Guess:
        if self._copy is not None and self._copy.at == len(context):
            return self._copy.guess
        self._sync(context)
        # One token more than can be drafted: the round's own token is checked against it too.
        guess = lookup(self.sources(), context, MAX_COPY + 1)
        cut = next((i for i, token in enumerate(guess.tokens) if self.ends_copy(token)), len(guess.tokens))
        guess = replace(guess, tokens=guess.tokens[:cut], support=guess.support[:cut], agree=guess.agree[:cut])
        self._copy = _Copy(guess, len(context))
        return guess

    @property
    def copy_cap(self) -> int:
        """As prompt lookup's: a few times the longest run this reply has copied (ngram.NgramDrafter)."""
        return self.runs.cap

    def _odds(self, guess: Guess) -> CopyOdds:
        return self.past_odds if guess.past else self.odds

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        guess = self._copy_at(context) if k_max > 0 else NO_GUESS
        if not guess.tokens:
            return NO_OFFER
        n = min(len(guess.tokens), k_max, MAX_COPY)  # the copy's last token checks the round's own: a batch of 64
        mean, rates = [], []
        odds = self._odds(guess)
        following = guess.past and guess.matched >= LONGEST
        for i in range(n):
            # The copy prior for a match this long, updated by how many earlier matches agreed here.
            prior = odds.rate(guess.matched + i, cautious=False)
            weight = guess.support[i] + PRIOR_WEIGHT
            m = (guess.agree[i] + PRIOR_WEIGHT * prior) / weight
            rate = max(0.0, m - math.sqrt(m * (1 - m) / weight))
            if following and guess.agree[i] == guess.support[i]:
                # A reply that has reproduced a past conversation for LONGEST tokens (a task asked again and
                # answered as before) is drafted, where no match disagrees, at no less than the odds that this
                # reply's copies of past matches earned token by token (not PRIOR_WEIGHT's few), as prompt
                # lookup drafts a copy within one text. Shorter past matches are mostly stock phrases: with
                # this floor for them, a structured reply with unrelated history lost 15% (2026-12-01).
                m, rate = max(m, prior), max(rate, odds.rate(guess.matched + i))
            mean.append(m)
            rates.append(rate)
        vouched = next((i for i in range(n) if guess.agree[i] < VOUCH), n)
        return Offer(rates, rates, mean=mean, proven=max(self.copy_cap, vouched))

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        guess = self._copy_at(context) if k > 0 else NO_GUESS
        tokens = guess.tokens[: min(k, MAX_COPY)]
        return Draft(tokens=list(tokens), q=[None] * len(tokens), source=self.name) if tokens else Draft()

    def learn(self, outcome: Outcome) -> None:
        """Book the guess on offer against what the target produced, up to the first token that broke it
        (each token once, at the match length it had then), and track copied runs for copy_cap."""
        copy, self._copy = self._copy, None
        if copy is not None and copy.at == outcome.at:
            odds = self._odds(copy.guess)  # one table judges every token of a guess here
            book(lambda _i: odds, copy.guess.tokens, copy.guess.matched, outcome.produced)
        self.runs.learn(self.name, outcome)
