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
    if len(stats.rounds_by_source) > 1 or set(stats.rounds_by_source) - {"target", "draft-model"}:
        names = {"target": "target alone", "ngram": "prompt lookup", "draft-model": "draft model"}
        split = ", ".join(f"{n} {names.get(s, s)}" for s, n in sorted(stats.rounds_by_source.items()))
        lines.append(f"rounds: {split}")
    if stats.drafted:
        split = stats.draft_s + stats.verify_s
        draft_share = stats.draft_s / split if split else 0.0
        reached = [r for r, n in zip(stats.position_rates(), stats.drafted_at, strict=True) if n]
        rates = " ".join(f"{r:.0%}" for r in reached)
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


def bench_table(result) -> Table:
    from .bench import COLUMNS, row_cells

    table = Table(title="specchat bench: target alone vs speculative (same run, interleaved)", title_justify="left")
    for column in COLUMNS:
        left = column in ("category", "variant")
        table.add_column(column, justify="left" if left else "right", no_wrap=True, min_width=len(column))
    previous = None
    for row in result.rows():
        cells = [Text(cell) for cell in row_cells(row)]
        if row.speedup is not None and row.variant != "target":
            cells[4].stylize("green" if row.speedup >= 1.0 else "red")
        if previous is not None and previous != row.category:
            table.add_section()
        previous = row.category
        table.add_row(*cells)
    return table


def cost_table(cost, ks) -> Table:
    table = Table(title="cost model measured on this machine", title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("target step", f"{cost.target_step_s * 1000:.1f} ms")
    if cost.c is not None:
        table.add_row("draft step", f"{cost.draft_step_s * 1000:.1f} ms")
        table.add_row("c = draft step / target step", f"{cost.c:.2f}")
    for n in sorted(cost.verify_s):
        if n in (1, 2, 3, 5, 9, 16) or n - 1 in ks:
            table.add_row(f"v({n}) = batch of {n} / target step", f"{cost.v(n):.2f}")
    return table


def speedup_plot(result, width: int = 70, height: int = 16) -> str:
    """Speedup vs k per category, as text (plotext)."""
    import plotext

    plotext.clear_figure()
    plotext.plot_size(width, height)
    plotext.theme("clear")
    for category, points in _speedup_series(result).items():
        plotext.plot([k for k, _ in points], [s for _, s in points], label=category, marker="dot")
    plotext.hline(1.0)
    plotext.title("speedup vs k (1.0 = target alone)")
    plotext.xlabel("k")
    return plotext.build()


def require_matplotlib():
    """matplotlib (the `plot` extra) set up for files, or a usage error saying how to get it."""
    from .errors import UsageError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib", hint="pip install 'specchat[plot]'") from None
    return plt


def save_speedup_plot(result, path) -> None:
    """Speedup vs k per category as PNG or SVG (matplotlib, from the `plot` extra)."""
    plt = require_matplotlib()
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for category, points in _speedup_series(result).items():
        axis.plot([k for k, _ in points], [s for _, s in points], marker="o", label=category)
    axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel("draft tokens per round (k)")
    axis.set_ylabel("speedup over target alone (median of paired ratios)")
    axis.set_title(result.meta.get("title", "specchat bench"))
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _speedup_series(result) -> dict:
    series: dict = {}
    for row in result.rows():
        if row.k and row.speedup is not None:
            series.setdefault(row.category, []).append((row.k, row.speedup))
    return series


@contextmanager
def bench_progress(console: Console, total: int) -> Iterator[Callable[[str, int], None]]:
    """Which prompt and variant is running, how far along, and an ETA."""
    from rich.progress import MofNCompleteColumn, SpinnerColumn, TimeElapsedColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("warming up", total=total)
    with progress:
        yield lambda description, done: progress.update(task, description=description, completed=done)
