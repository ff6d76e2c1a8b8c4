"""All terminal output (Rich): progress for pulls, the model table, stats, errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from .speculative import Stats


def stderr_console(no_color: bool = False) -> Console:
    return Console(stderr=True, no_color=no_color or "NO_COLOR" in os.environ, highlight=False)


def stdout_console(no_color: bool = False) -> Console:
    return Console(no_color=no_color or "NO_COLOR" in os.environ, highlight=False, soft_wrap=True)


def print_error(console: Console, message: str, hint: str | None) -> None:
    line = Text("error: ", style="bold red")
    line.append(message)
    if hint:
        line.append("  hint: ", style="yellow")
        line.append(hint)
    console.print(line, soft_wrap=True)


def note(console: Console, message: str) -> None:
    console.print(Text(message, style="dim"), soft_wrap=True)


@contextmanager
def download_progress(console: Console) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """Yields start(label, total) -> advance(n): one bar per file, on stderr."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )

    def start(label: str, total: int) -> Callable[[int], None]:
        if not progress.live.is_started:
            progress.start()  # only when something is downloaded: no empty live region otherwise
        task = progress.add_task(label, total=total)
        return lambda n: progress.advance(task, n)

    try:
        yield start
    finally:
        if progress.live.is_started:
            progress.stop()


def stats_lines(stats: Stats, k: int, mode: str) -> list[str]:
    """A short, plain-text summary (shared by --stats and the chat footer)."""
    parts = [
        f"{stats.generated} tokens in {stats.total_s:.2f}s",
        f"{stats.tokens_per_s:.1f} tok/s (decode)",
        f"TTFT {stats.first_token_s:.2f}s",
        f"stop: {stats.stop_reason}",
    ]
    lines = [f"[{mode}] " + ", ".join(parts)]
    if stats.drafted:
        split = stats.draft_s + stats.verify_s
        draft_share = stats.draft_s / split if split else 0.0
        rates = " ".join(f"{r:.0%}" for r in stats.position_rates())
        lines.append(
            f"k={k}: accepted {stats.accepted}/{stats.drafted} drafts ({stats.acceptance_rate:.0%}), "
            f"{stats.mean_accepted:.2f} accepted per round (+1 target token), "
            f"time {draft_share:.0%} draft / {1 - draft_share:.0%} verify; by position: {rates}"
        )
    return lines


def print_stats(console: Console, stats: Stats, k: int, mode: str) -> None:
    for line in stats_lines(stats, k, mode):
        console.print(Text(line, style="cyan"), soft_wrap=True)


def models_table(rows: list[dict]) -> Table:
    """One line per pair; rows come in target/draft order from `specchat models`."""
    table = Table(title="specchat pairs", title_justify="left", caption="* = file name not verified on the Hub")
    for column in ("pair", "target", "draft", "size", "present"):
        table.add_column(column, overflow="fold")

    def name(row: dict) -> Text:
        return Text(row["file"].removesuffix(".gguf") + ("" if row["verified"] else " *"))

    def present(row: dict) -> Text:
        return Text("yes", style="green") if row["present"] else Text("no", style="dim")

    for target, draft in zip(rows[::2], rows[1::2], strict=True):
        sizes = [r["size"] for r in (target, draft)]
        size = f"{sum(sizes) / 1e9:.1f} GB" if all(sizes) else "?"
        both = Text(" / ").join([present(target), present(draft)])
        label = Text(target["pair"], style="bold" if target["default"] else "")
        if target["default"]:
            label.append(" (default)", style="dim")
        table.add_row(label, name(target), name(draft), size, both)
    return table


def write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
