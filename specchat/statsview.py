"""Every line that describes a reply or a session: --stats, the live footer and the line under a reply, the
chat's /stats and the acceptance bars by draft position."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from .modes import label_of
from .view import n_tokens

if TYPE_CHECKING:  # `specchat logs` reads STOPS: the engine (and numpy) imported with it took 140 ms
    from .speculative import Stats


def acceptance(stats: Stats) -> str:
    """The drafts the target kept, as every line but --stats' and /stats' (which add "drafts") names them."""
    return f"accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})"


def per_round(stats: Stats, *, short: bool = False) -> str:
    """Accepted draft tokens per round, in every line's words and rounding (short: the live footer's): --stats,
    the line under a reply and /stats had two wordings, and the footer a third rounding."""
    number = f"{stats.mean_accepted:.2f}"
    return f"{number}/round" if short else f"{number} accepted per round (+1 target token)"


def _draft_share(stats: Stats) -> float:
    busy = stats.draft_s + stats.verify_s
    return stats.draft_s / busy if busy else 0.0


def stats_lines(stats: Stats, k: int, label: str) -> list[str]:
    """A short, plain-text summary of one reply (--stats)."""
    parts = [
        f"{n_tokens(stats.generated)} in {stats.total_s:.2f}s",
        f"{stats.tokens_per_s:.1f} tok/s (decode)",
        f"TTFT {stats.first_token_s:.2f}s" if stats.rounds else "no token",  # 0.00s read as instant
        f"stop: {stats.stop_reason}",
    ]
    lines = [f"[{label}] " + ", ".join(parts)]
    if len(stats.rounds_by_source) > 1 or set(stats.rounds_by_source) - {"target", "spec"}:
        split = ", ".join(f"{n} {label_of(s)}" for s, n in sorted(stats.rounds_by_source.items()))
        lines.append(f"rounds: {split}")
    if stats.drafted:
        share = _draft_share(stats)
        rates = " ".join(f"{r:.0%}" for r in stats.position_rates() if r is not None)
        lines.append(
            f"k={k}: accepted {stats.accepted}/{stats.drafted} drafts ({stats.acceptance_rate:.0%}), "
            f"{per_round(stats)}, "
            f"time {share:.0%} draft / {1 - share:.0%} verify; by position: {rates}"
        )
    return lines


def print_stats(console: Console, stats: Stats, k: int, label: str) -> None:
    for line in stats_lines(stats, k, label):  # wrapped at words on a terminal, one line elsewhere (stderr_console)
        console.print(Text(line, style="cyan"))


def footer(stats: Stats, label: str, width: int | None = None) -> Text:
    """The one-line live footer: speed so far (the reply's, over the time after the prefill, as the line that
    replaces it: over draft + verify time alone it read faster), mode, acceptance, draft/verify split. Within
    `width` (the terminal's) the parts that do not fit are left out whole: cut by the ellipsis, 80 columns read
    "verify 6…"."""
    parts = [f"{stats.tokens_per_s:5.1f} tok/s", label]
    if stats.drafted:
        share = _draft_share(stats)
        parts += [
            f"accepted {stats.acceptance_rate:.0%}",
            per_round(stats, short=True),
            f"draft {share:.0%} / verify {1 - share:.0%}",
        ]
    while width is not None and len(parts) > 2 and len(" · ".join(parts)) > width:
        parts.pop()
    return Text(" · ".join(parts), style="reverse", no_wrap=True, overflow="ellipsis")


STOPS = {"interrupted": "interrupted", "context": "context full", "max_tokens": "max tokens reached"}


def summary_line(stats: Stats, label: str) -> Text:
    """The line under a reply in the live view."""
    line = Text(f"── {n_tokens(stats.generated)}, {stats.tokens_per_s:.1f} tok/s, {label}", style="dim")
    if stats.drafted:
        line.append(
            f", {acceptance(stats)}, {per_round(stats)}",
            style="dim",
        )
    if stats.stop_reason in STOPS:
        line.append(f" [{STOPS[stats.stop_reason]}]", style="yellow")
    return line


def session_lines(totals: Stats) -> list[str]:
    """The chat's /stats: every reply of the session, merged. Its speed is the replies' own (generated tokens
    over decode time, as under each reply), not tokens over draft + verify time, which leaves out the
    sampling and the view and read faster than any reply had run. Rounds are shown only next to drafts: with
    none, a reply's last round made only the end token, and '14 tokens in 15 rounds' read as a miscount."""
    rounds = f" in {totals.rounds} rounds" if totals.drafted else ""
    lines = [f"session: {n_tokens(totals.generated)}{rounds}, {totals.tokens_per_s:.1f} tok/s (decode)"]
    if totals.drafted:
        share = _draft_share(totals)
        lines.append(
            f"accepted {totals.accepted}/{totals.drafted} drafts ({totals.acceptance_rate:.0%}), "
            f"{per_round(totals)}; "
            f"time {share:.0%} draft / {1 - share:.0%} verify"
        )
    return lines


def position_bars(
    drafted_at: list[int], accepted_at: list[int], width: int = 20, columns: int | None = None
) -> list[Text]:
    """One bar per draft position that was drafted: how often the target accepted the draft's i-th guess
    (auto may be allowed 64 and draft far fewer; those positions were not measured, not 0%). Within `columns`
    (the console's width) the bars shrink to fit: a line wider put its ' 84% of 19' on a row of its own."""
    if columns is not None:  # "  pos NN " and " 100% of N", around the bar
        width = max(4, min(width, columns - 9 - 9 - len(str(max(drafted_at, default=0)))))
    lines = []
    for i, (drafted, accepted) in enumerate(zip(drafted_at, accepted_at, strict=True), start=1):
        if not drafted:
            continue
        rate = accepted / drafted
        filled = round(rate * width)
        line = Text(f"  pos {i:>2} ", style="dim")
        line.append("█" * filled, style="green")
        line.append("░" * (width - filled), style="dim")
        line.append(f" {rate:4.0%} of {drafted}", style="dim")
        lines.append(line)
    return lines
