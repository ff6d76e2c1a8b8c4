"""Prompt lookup: model-free drafts copied from the prompt and the text so far.

If the last n tokens (n = max_n down to min_n) occurred earlier, the tokens that followed an earlier
occurrence are proposed: for n = max_n the one whose past matches furthest back (among the latest
CANDIDATES), else the most recent. It costs a dictionary lookup, and it wins where the reply
repeats its input: editing code, quoting, JSON with repeated keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..sampling import Sampler
from .base import Draft

CANDIDATES = 16  # earlier occurrences of the longest n-gram compared by how far back they match


class NgramIndex:
    """Earlier occurrences of every n-gram (n <= max_n), kept up to date incrementally.

    Only the most recent occurrence is kept for n < max_n; for n = max_n all of them, because an edited
    file repeats its short n-grams many times and the right place to copy from is the one whose longer
    past matches (the same spot in the input), not merely the latest.
    """

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.tokens: list[int] = []
        self.next_after: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token that followed it
        self.all_after: dict[tuple[int, ...], list[int]] = {}  # max_n-gram -> every follower, oldest first

    def sync(self, context: Sequence[int]) -> None:
        n_old = len(self.tokens)
        if len(context) < n_old or list(context[:n_old]) != self.tokens:
            self.tokens, self.next_after, self.all_after, n_old = [], {}, {}, 0  # another conversation
        self.tokens.extend(context[n_old:])
        # Index n-grams that now have a follower; the current suffix has none yet, so lookups of the
        # suffix always find an EARLIER occurrence.
        for follower in range(max(1, n_old), len(self.tokens)):
            for n in range(1, min(self.max_n, follower) + 1):
                self.next_after[tuple(self.tokens[follower - n : follower])] = follower
            if follower >= self.max_n:
                self.all_after.setdefault(tuple(self.tokens[follower - self.max_n : follower]), []).append(follower)

    def lookup(self, n: int) -> int | None:
        """Index of the token that followed the latest earlier occurrence of the last n tokens."""
        if n > len(self.tokens):
            return None
        return self.next_after.get(tuple(self.tokens[-n:]))

    def lookup_all(self) -> list[int]:
        """Followers of every earlier occurrence of the last max_n tokens, the most recent last."""
        if self.max_n > len(self.tokens):
            return []
        return self.all_after.get(tuple(self.tokens[-self.max_n :]), [])


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n = min_n
        self.index = NgramIndex(max_n)

    def prefill(self, context: Sequence[int]) -> None:
        self.index.sync(context)

    def match(self, context: Sequence[int], longest: int = 128) -> tuple[int, int | None]:
        """(match length, start of the continuation) for the longest suffix match, or (0, None).

        The index finds matches of up to max_n tokens; the length is then extended backwards (up to
        `longest`), because a long match means the reply is copying its input, and copies continue.
        Among the recent occurrences of a max_n-gram the one that matches furthest back wins (ties: the
        most recent).
        """
        self.index.sync(context)
        tokens = self.index.tokens
        best = (0, None)
        for start in reversed(self.index.lookup_all()[-CANDIDATES:]):
            length = self.index.max_n
            while length < min(longest, start) and tokens[start - 1 - length] == tokens[-1 - length]:
                length += 1
            if length > best[0]:
                best = (length, start)
        if best[1] is not None:
            return best
        for n in range(min(self.index.max_n - 1, len(tokens)), self.min_n - 1, -1):
            start = self.index.lookup(n)
            if start is not None:
                return n, start
        return 0, None

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        _, start = self.match(context)
        if start is None or k <= 0:
            return Draft()
        tokens = self.index.tokens[start : start + k]
        return Draft(tokens=list(tokens), q=[None] * len(tokens), source=self.name)

    def feedback(self, drafted: int, accepted: int, verify_s: float) -> None:
        """Prompt lookup has nothing to learn; the adaptive drafter keeps the statistics."""
