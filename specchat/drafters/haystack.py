"""Where the text's end matches a token list furthest back: in the text itself (prompt lookup's own
index, ngramindex.py) or in another list it may copy from, a Haystack. The input as rewritten by learned
changes (rewrite.py) is one; the text an API client says the reply will hold (`prediction`,
ngram.NgramDrafter.expect) another."""

from __future__ import annotations

from collections.abc import Sequence


def matched_back(tokens: Sequence[int], end: int, known: int, longest: int, text: Sequence[int] | None = None) -> int:
    """How far tokens[:end] and the whole text (default: `tokens` itself) end alike, given that their last
    `known` tokens do (at most `longest`, and never reaching back past the start of either)."""
    text = tokens if text is None else text
    length, most = known, min(longest, end, len(text))
    while length < most and tokens[end - 1 - length] == text[-1 - length]:
        length += 1
    return length


def furthest(
    tokens: Sequence[int], starts: Sequence[int], text: Sequence[int], known: int, longest: int
) -> tuple[int, int] | None:
    """(match length, start) of the place in `tokens` (a continuation start from `starts`, the latest last)
    whose past matches the end of `text` furthest back; among equals the latest. None: no start."""
    best = None
    for start in reversed(starts):
        length = matched_back(tokens, start, known, longest, text)
        if best is None or length > best[0]:
            best = (length, start)
    return best


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
        starts = self.followers.get(tuple(context[-self.n :]), [])[-candidates:]
        return furthest(self.tokens, starts, context, self.n, longest)
