"""All terminal output (Rich): consoles, errors, progress, every stats line and every table."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from .errors import SpecchatError
from .modes import label_of
from .speculative import Stats


class StdoutError(SpecchatError):
    """stdout cannot take the output (disk full, closed): the user's environment, not a bug."""


class _Stdout:
    """sys.stdout as looked up at each write (test runners swap it), with write failures made one
    clear error. A reader that went away (EPIPE) stays a BrokenPipeError: that one is quiet."""

    def __init__(self, what: str = "the reply") -> None:
        self.what = what

    def _stream(self):
        if sys.stdout is None:
            raise StdoutError(f"cannot write {self.what} to stdout: it is closed", hint="give the command a stdout")
        return sys.stdout

    def _guard(self, call):
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError as exc:
            reason = (exc.strerror or os.strerror(exc.errno or errno.EIO)).lower()
            raise StdoutError(
                f"cannot write {self.what} to stdout: {reason}", hint="free some space or redirect stdout elsewhere"
            ) from None

    def write(self, text: str) -> int:
        stream = self._stream()
        return self._guard(lambda: stream.write(text))

    def flush(self) -> None:
        if sys.stdout is not None:
            self._guard(sys.stdout.flush)

    def isatty(self) -> bool:
        return sys.stdout is not None and sys.stdout.isatty()

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def _no_color(flag: bool) -> bool:
    """--no-color, or NO_COLOR set and not empty (no-color.org: an empty NO_COLOR does not count)."""
    return flag or os.environ.get("NO_COLOR", "") != ""


def stderr_console(no_color: bool = False) -> Console:
    return Console(stderr=True, no_color=_no_color(no_color), highlight=False)


def stdout_console(no_color: bool = False, what: str = "the reply") -> Console:
    return Console(file=_Stdout(what), no_color=_no_color(no_color), highlight=False, soft_wrap=True)


def write_stdout(text: str, what: str = "the reply") -> None:
    out = _Stdout(what)
    out.write(text)
    out.flush()


def silence_stdout() -> None:
    """After EPIPE or a failed write, point stdout at /dev/null so that the final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def restore_terminal() -> None:
    """After Ctrl-C: colours reset, cursor shown (a live region may have hidden it)."""
    if sys.stderr.isatty():
        sys.stderr.write("\x1b[0m\x1b[?25h")
        sys.stderr.flush()


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
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    progress = Progress(*columns, TimeRemainingColumn(), console=console, transient=False)

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


@contextmanager
def bench_progress(console: Console, total: int) -> Iterator[Callable[[str, int], None]]:
    """Which prompt and variant is running, how far along, and an ETA."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    progress = Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
    task = progress.add_task("warming up", total=total)
    with progress:
        yield lambda description, done: progress.update(task, description=description, completed=done)


# -- stats: every line that describes a reply or a session ---------------------------------------------


def _draft_share(stats: Stats) -> float:
    busy = stats.draft_s + stats.verify_s
    return stats.draft_s / busy if busy else 0.0


def stats_lines(stats: Stats, k: int, label: str) -> list[str]:
    """A short, plain-text summary of one reply (--stats)."""
    parts = [
        f"{stats.generated} tokens in {stats.total_s:.2f}s",
        f"{stats.tokens_per_s:.1f} tok/s (decode)",
        f"TTFT {stats.first_token_s:.2f}s",
        f"stop: {stats.stop_reason}",
    ]
    lines = [f"[{label}] " + ", ".join(parts)]
    if len(stats.rounds_by_source) > 1 or set(stats.rounds_by_source) - {"target", "spec"}:
        split = ", ".join(f"{n} {label_of(s)}" for s, n in sorted(stats.rounds_by_source.items()))
        lines.append(f"rounds: {split}")
    if stats.drafted:
        share = _draft_share(stats)
        rates = " ".join(f"{r:.0%}" for r, n in zip(stats.position_rates(), stats.drafted_at, strict=True) if n)
        lines.append(
            f"k={k}: accepted {stats.accepted}/{stats.drafted} drafts ({stats.acceptance_rate:.0%}), "
            f"{stats.mean_accepted:.2f} accepted per round (+1 target token), "
            f"time {share:.0%} draft / {1 - share:.0%} verify; by position: {rates}"
        )
    return lines


def print_stats(console: Console, stats: Stats, k: int, label: str) -> None:
    for line in stats_lines(stats, k, label):
        console.print(Text(line, style="cyan"), soft_wrap=True)


def footer(stats: Stats, label: str) -> Text:
    """The one-line live footer: speed so far, mode, acceptance, draft/verify split."""
    busy = stats.draft_s + stats.verify_s
    parts = [f"{stats.generated / busy if busy else 0.0:5.1f} tok/s", label]
    if stats.drafted:
        share = _draft_share(stats)
        parts += [
            f"accepted {stats.acceptance_rate:.0%}",
            f"{stats.mean_accepted:.1f}/round",
            f"draft {share:.0%} / verify {1 - share:.0%}",
        ]
    return Text(" · ".join(parts), style="reverse", no_wrap=True, overflow="ellipsis")


STOPS = {"interrupted": "interrupted", "context": "context full", "max_tokens": "max tokens reached"}


def summary_line(stats: Stats, label: str) -> Text:
    """The line under a reply in the live view."""
    line = Text(f"── {stats.generated} tokens, {stats.tokens_per_s:.1f} tok/s, {label}", style="dim")
    if stats.drafted:
        line.append(
            f", accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%}), "
            f"{stats.mean_accepted:.2f} per round + 1 target token",
            style="dim",
        )
    if stats.stop_reason in STOPS:
        line.append(f" [{STOPS[stats.stop_reason]}]", style="yellow")
    return line


def session_lines(totals: Stats) -> list[str]:
    """The chat's /stats: every reply of the session, merged."""
    busy = totals.draft_s + totals.verify_s
    speed = totals.generated / busy if busy else 0.0
    lines = [f"session: {totals.generated} tokens in {totals.rounds} rounds, {speed:.1f} tok/s"]
    if totals.drafted:
        share = _draft_share(totals)
        lines.append(
            f"accepted {totals.accepted}/{totals.drafted} drafts ({totals.acceptance_rate:.0%}), "
            f"{totals.mean_accepted:.2f} per round + 1 target token; "
            f"time {share:.0%} draft / {1 - share:.0%} verify"
        )
    return lines


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


# -- tables -------------------------------------------------------------------------------------------


def model_rows(verify: bool) -> tuple[list[dict], list[SpecchatError]]:
    """`specchat models`: one row per pair and role, with presence (and checksums with verify)."""
    from . import download
    from .registry import load_registry

    registry = load_registry()
    rows, bad = [], []
    for pair in registry.pairs.values():
        for role, spec in (("target", pair.target), ("draft", pair.draft)):
            path = download.locate(spec)
            row = {"pair": pair.name, "default": pair.name == registry.default_pair, "role": role}
            row |= {"model": spec.name, "repo": spec.repo, "file": spec.file, "size": spec.size}
            row |= {"sha256": spec.sha256, "present": path is not None, "path": str(path) if path else None}
            row |= {"verified": spec.verified, "mirror": spec.mirror is not None}
            if verify and path is not None:
                try:
                    download.verify(spec, path)
                    row["checksum_ok"] = True
                except SpecchatError as exc:
                    row["checksum_ok"] = False
                    bad.append(exc)
            rows.append(row)
    return rows, bad


def print_models(*, as_json: bool, verify: bool) -> None:
    """`specchat models`: the table (or JSON) on stdout; a bad file (with verify) raises after it."""
    import json

    from .paths import models_dir, overlay_file

    rows, bad = model_rows(verify)
    if as_json:
        info = {"models_dir": str(models_dir()), "overlay": str(overlay_file()), "pairs": rows}
        write_stdout(json.dumps(info, indent=2) + "\n", "the list")
    else:
        out = stdout_console(what="the list")
        out.print(models_table(rows))
        out.print(f"models directory: {models_dir()}\noverlay file: {overlay_file()}", highlight=False)
    for exc in bad[1:]:
        stderr_console().print(f"bad file: {exc.message}", style="red")
    if bad:
        raise bad[0]


def models_table(rows: list[dict]) -> Table:
    """One row per pair (rows come in target/draft order from model_rows()): the target's file on the
    first line, the draft's on the second, so that the table fits in 80 columns without cutting names."""
    table = Table(
        title="specchat pairs", title_justify="left", caption="* = file name not verified on the Hub",
        caption_justify="left", show_lines=True,
    )  # fmt: skip
    table.add_column("pair", overflow="fold")
    table.add_column("target / draft file", overflow="fold")
    table.add_column("size", no_wrap=True)
    table.add_column("present", no_wrap=True)

    def name(row: dict) -> str:
        return row["file"].removesuffix(".gguf") + ("" if row["verified"] else " *")

    def present(row: dict) -> Text:
        return Text("yes", style="green") if row["present"] else Text("no", style="dim")

    for target, draft in zip(rows[::2], rows[1::2], strict=True):
        sizes = [r["size"] for r in (target, draft)]
        size = f"{sum(sizes) / 1e9:.1f} GB" if all(sizes) else "?"
        label = Text(target["pair"], style="bold" if target["default"] else "")
        if target["default"]:
            label.append("\n(default)", style="dim")
        files = Text(f"{name(target)}\n{name(draft)}")
        table.add_row(label, files, size, Text("\n").join([present(target), present(draft)]))
    return table


COLUMNS = ["category", "variant", "n", "tok/s", "speedup", "S(k)", "S(t/r)", "accept", "acc/rnd", "draft%", "TTFT"]


def row_cells(row) -> list[str]:
    """A bench.Row as the text of its cells (the table, Markdown)."""

    def fmt(value, pattern):
        return pattern.format(value) if value is not None else "-"

    return [
        row.label,  # the category, with "turn N" where its records have several turns
        row.variant,
        str(row.n),
        f"{row.tokens_per_s:.1f}",
        fmt(row.speedup, "{:.2f}x"),
        fmt(row.predicted_speedup, "{:.2f}x"),
        fmt(row.cost_model_speedup, "{:.2f}x"),
        fmt(row.acceptance_rate, "{:.0%}"),
        fmt(row.mean_accepted_length, "{:.2f}"),
        fmt(row.draft_share, "{:.0%}"),
        f"{row.ttft_s:.2f}",
    ]


def bench_table(result) -> Table:
    table = Table(title="specchat bench: target alone vs speculative (same run, interleaved)", title_justify="left")
    for column in COLUMNS:
        left = column in ("category", "variant")
        table.add_column(column, justify="left" if left else "right", no_wrap=True, min_width=len(column))
    previous = None
    for row in result.rows():
        cells = [Text(cell) for cell in row_cells(row)]
        if row.speedup is not None and row.variant != "target":
            cells[4].stylize("green" if row.speedup >= 1.0 else "red")
        if previous is not None and previous != row.label:
            table.add_section()
        previous = row.label
        table.add_row(*cells)
    return table


def cost_table(costs, ks) -> Table:
    """costmodel.Costs as measured by the bench: step times and the ratios c and v(n)."""
    table = Table(title="cost model measured on this machine", title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    step = costs.calibrated_step_s
    table.add_row("target step", f"{step * 1000:.1f} ms")
    if costs.c is not None:
        table.add_row("draft step", f"{costs.c * step * 1000:.1f} ms")
        table.add_row("c = draft step / target step", f"{costs.c:.2f}")
    for n in sorted(costs.verify):
        if n in (1, 2, 3, 5, 9, 16) or n - 1 in ks:
            table.add_row(f"v({n}) = batch of {n} / target step", f"{costs.v(n):.2f}")
    return table


def tune_table(title: str, estimates) -> Table:
    table = Table(title=f"specchat tune: {title}", title_justify="left")
    for column in ("mode", "acceptance", "best k", "predicted", "best k >= 1", "predicted if drafting"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for e in estimates:
        accept = f"{e.acceptance:.0%}" if e.acceptance is not None else "-"
        drafting = f"{e.drafting_speedup:.2f}x" if e.drafting_speedup is not None else "-"
        table.add_row(e.mode, accept, str(e.k), f"{e.predicted_speedup:.2f}x", str(e.best_drafting_k or "-"), drafting)
    return table


def print_tune(console: Console, title: str, tuning, estimates, path, previous=None) -> None:
    console.print(tune_table(title, estimates))
    console.print(f"now:   {cost_summary(tuning.costs)}", highlight=False)
    if previous is not None:
        state = "measured under load" if previous.costs.busy else "stale" if previous.stale else previous.source
        console.print(f"saved: {cost_summary(previous.costs)} ({state})", highlight=False)
    best = max(estimates, key=lambda e: e.predicted_speedup)
    verdict = "the target alone" if best.mode == "target" else f"{best.mode} (k={best.k})"
    console.print(f"on this machine auto starts from: {verdict}; saved to {path}", highlight=False)


def cost_summary(costs) -> str:
    """One line of a calibration: the target step, c and a few v(n), as tune shows saved vs now."""
    c_text = f", c = {costs.c:.2f}" if costs.c is not None else ""
    ratios = ", ".join(f"v({n}) = {costs.v(n):.2f}" for n in (2, 5, 9, 16, 64))
    busy = " (other programs were using the CPUs)" if costs.busy else ""
    return f"target step {costs.calibrated_step_s * 1000:.1f} ms{c_text}, {ratios} target steps{busy}"
