"""Stop strings in a streamed reply: the text cut at the first one, and what could start one held back until the
next piece decides (servequeue.py runs it on each round's text)."""

from __future__ import annotations


class StopScanner:
    """Cuts the text at the first stop string. Text that could be the start of a stop string is held
    back until the next piece decides, so that a streamed reply never shows part of a stop string."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """The text that is safe to show now; sets `stopped` when a stop string was reached."""
        self.pending += text
        # The stop that ends first, as if the text came a character at a time: a round of several tokens may hold
        # "again:\nh" and "ain:", which a round of one token stops at when it ends, before the longer one exists.
        hits = [(i + len(s), i) for s in self.stops if (i := self.pending.find(s)) >= 0]
        if hits:
            out, self.pending, self.stopped = self.pending[: min(hits)[1]], "", True
            return out
        # Only a stop's first len(pending) characters can end the pending text: every prefix of a long stop (a
        # request's 1 MB body holds stops of 250,000 characters) took seconds a round on the one worker.
        longest = len(self.pending) + 1
        keep = max(
            (n for s in self.stops for n in range(1, min(len(s), longest)) if self.pending.endswith(s[:n])), default=0
        )
        cut = len(self.pending) - keep
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
