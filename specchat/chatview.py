"""The live view of a reply (Rich): what the draft guessed, what the target kept, what it cost.

Reply text is append-only: every completed line is printed once, above a small Rich Live region that
holds only the line being written and a one-line footer. Rich Live is known to truncate or duplicate
long streamed text when it owns it, so it never does here.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from .runtime import ACCEPTED, REJECTED, TARGET, Segment
from .speculative import Round, Stats

STYLES = {ACCEPTED: "green", TARGET: "bold", REJECTED: "dim strike red"}


def legend() -> Text:
    text = Text("legend: ", style="dim")
    text.append("draft token the target accepted", style=STYLES[ACCEPTED])
    text.append(" · ", style="dim")
    text.append("target's own token", style=STYLES[TARGET])
    text.append(" · ", style="dim")
    text.append("rejected draft guess", style=STYLES[REJECTED])
    return text


def footer(stats: Stats, mode: str) -> Text:
    """The one-line live footer: speed so far, mode, acceptance, draft/verify split."""
    busy = stats.draft_s + stats.verify_s
    parts = [f"{stats.generated / busy if busy else 0.0:5.1f} tok/s", mode]
    if stats.drafted:
        parts += [
            f"accepted {stats.acceptance_rate:.0%}",
            f"{stats.mean_accepted:.1f}/round",
            f"draft {stats.draft_s / busy:.0%} / verify {stats.verify_s / busy:.0%}",
        ]
    return Text(" · ".join(parts), style="reverse", no_wrap=True, overflow="ellipsis")


def summary_line(stats: Stats, k: int, mode: str) -> Text:
    line = Text(f"── {stats.generated} tokens, {stats.tokens_per_s:.1f} tok/s, {mode}", style="dim")
    if stats.drafted:
        line.append(
            f", accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%}), "
            f"{stats.mean_accepted:.2f} per round + 1 target token",
            style="dim",
        )
    if stats.stop_reason in ("interrupted", "context", "max_tokens"):
        reason = {"interrupted": "interrupted", "context": "context full", "max_tokens": "max tokens reached"}
        line.append(f" [{reason[stats.stop_reason]}]", style="yellow")
    return line


def position_bars(drafted_at: list[int], accepted_at: list[int], width: int = 20) -> list[Text]:
    """One bar per draft position: how often the target accepted the draft's i-th guess."""
    lines = []
    for i, (drafted, accepted) in enumerate(zip(drafted_at, accepted_at, strict=True), start=1):
        rate = accepted / drafted if drafted else 0.0
        filled = round(rate * width)
        line = Text(f"  pos {i:>2} ", style="dim")
        line.append("█" * filled, style="green")
        line.append("░" * (width - filled), style="dim")
        line.append(f" {rate:4.0%} of {drafted}", style="dim")
        lines.append(line)
    return lines


class ReplyView:
    """Streams one reply to a terminal console; use as a context manager around generation."""

    def __init__(self, console: Console, *, k: int, mode: str, show_rejected: bool = True) -> None:
        self.console = console
        self.k = k
        self.mode = mode
        self.show_rejected = show_rejected
        self.partial = Text()
        self.totals = Stats()
        self.live = Live(
            console=console, auto_refresh=False, transient=True, redirect_stdout=False, redirect_stderr=False
        )

    def __enter__(self) -> ReplyView:
        self.live.start()
        self._refresh()
        return self

    def __exit__(self, *exc) -> None:
        self.live.stop()  # transient: the footer goes, then the last partial line is printed for good
        if self.partial.plain:
            self.console.print(self.partial, soft_wrap=False)
        self.partial = Text()

    def on_round(self, event: Round | None, segments: list[Segment]) -> None:
        if event is not None:
            self.totals.record(len(event.drafted), event.accepted, len(event.emitted), event.draft_s, event.verify_s)
        for segment in segments:
            if segment.kind == REJECTED and not self.show_rejected:
                continue
            self._append(segment)
        self._refresh()

    def _append(self, segment: Segment) -> None:
        # Without a draft every token is the target's own: no emphasis needed.
        style = STYLES[segment.kind] if self.k else ""
        text = segment.text
        if segment.kind == REJECTED:
            text = text.replace("\n", "⏎")  # a ghost newline must not break the real text's lines
        lines = text.split("\n")
        for index, piece in enumerate(lines):
            self.partial.append(piece, style=style)
            if index < len(lines) - 1:
                self.live.console.print(self.partial, soft_wrap=False)  # printed above the live region
                self.partial = Text()

    def _refresh(self) -> None:
        self.live.update(Group(self.partial, footer(self.totals, self.mode)), refresh=True)
