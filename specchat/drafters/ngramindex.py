"""The n-gram index prompt lookup (ngram.py) drafts from: where each n-gram of the text so far occurred before,
kept up to date as the text grows."""

from __future__ import annotations

from collections.abc import Sequence


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
