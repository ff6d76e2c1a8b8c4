"""A reply as the pipeline streams it and returns it: each round's text in segments, the stats so far, the whole.

Pipeline.generate (runtime.py) makes these; the views, the outputs, the log and the server read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .speculative import Round, Stats

ACCEPTED, TARGET, REJECTED = "accepted", "target", "rejected"


@dataclass(frozen=True)
class Segment:
    """Text of one round as the user sees it: accepted draft tokens, the target's own, or ghost text."""

    text: str
    kind: str  # ACCEPTED | TARGET | REJECTED


@dataclass(frozen=True)
class Update:
    """One streamed step of a reply: the round (None: text with no round of its own), its text, the stats so far."""

    round: Round | None
    segments: list[Segment]
    stats: Stats


@dataclass
class Generation:
    text: str
    tokens: list[int]
    stats: Stats
    set_aside: dict[str, int] = field(default_factory=dict)  # auto: drafters its guard set aside in this reply
    threads: tuple[int, int] | None = None  # (fewest, most) llama.cpp threads in this reply (cpuload.py)

    @property
    def unanswered(self) -> bool:
        """Stopped (Ctrl-C) before its first token: no reply to show stats of, nor to keep in a conversation."""
        return self.stats.stop_reason == "interrupted" and not self.tokens
