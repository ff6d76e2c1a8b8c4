"""Another token list prompt lookup may copy from: an index of its n-grams and where the text's end
matches it furthest back. The input as rewritten by learned changes (rewrite.py) is one; the text an
API client says the reply will hold (`prediction`, ngram.NgramDrafter.expect) another."""

from __future__ import annotations

from collections.abc import Sequence


class Haystack:
    def __init__(self, tokens: Sequence[int], n: int) -> None:
        self.tokens = list(tokens)
        self.n = n
        self.followers: dict[tuple[int, ...], list[int]] = {}  # n-gram -> index of every token after it
        for end in range(n, len(self.tokens)):
            self.followers.setdefault(tuple(self.tokens[end - n : end]), []).append(end)

    def match(self, context: Sequence[int], longest: int, candidates: int) -> tuple[int, int] | None:
        """(match length, start of the continuation) of the text's end here: among the latest `candidates`
        places its last n tokens occur, the one that matches furthest back (at most `longest`)."""
        if len(context) < self.n:
            return None
        best = None
        for start in reversed(self.followers.get(tuple(context[-self.n :]), [])[-candidates:]):
            length, most = self.n, min(longest, start, len(context))
            while length < most and self.tokens[start - 1 - length] == context[-1 - length]:
                length += 1
            if best is None or length > best[0]:
                best = (length, start)
        return best
