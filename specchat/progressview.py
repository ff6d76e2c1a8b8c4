"""Bench's and tune's progress on stderr: which prompt and variant is running, how far along, and an ETA; a bar
on a terminal, elsewhere (`2> log`, CI) a plain line now and then."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .terminal import cursor_kept_hidden
from .view import note, one_line, redrawn

LOGGED_EVERY_S = 30.0  # the most often a progress line is written where no bar is drawn (`2> log`, CI)


@contextmanager
def bench_progress(console: Console, total: int) -> Iterator[Callable[[str, int], None]]:
    """Which prompt and variant is running, how far along, and an ETA: a bar on a terminal, else a line now
    and then (logged_progress)."""
    if not redrawn(console):
        yield logged_progress(console, total)
        return
    # A description names a prompt's category and id (from a --prompts file): no markup.
    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn())
    progress = Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
    task = progress.add_task("warming up", total=total)
    with progress, cursor_kept_hidden(console):
        yield lambda description, done, total=None: progress.update(
            task, description=one_line(description), completed=done, total=total
        )


def logged_progress(console: Console, total: int) -> Callable[..., None]:
    """The bar's news as one plain line at most every LOGGED_EVERY_S, where no bar can be drawn: a bench of
    2,000 prompts in a log said nothing for minutes after its "N replies to generate" line. Written as a
    run starts, so never more than once a run (a run of a slow model may outlast the interval)."""
    began = last = first = time.monotonic()  # first: as the first measured run began (warm-up and history are done 0)
    size = total

    def advance(description: str, done: int, total: int | None = None) -> None:
        nonlocal last, first, size
        now, size = time.monotonic(), size if total is None else total
        if done == 0:
            first = now
        if now - last < LOGGED_EVERY_S or done >= size:
            return
        last = now
        line = f"{done}/{size} replies done, {_clock_time(now - began)} elapsed"
        if done:  # the mean over every run so far: bench interleaves its runs (tune runs its drafters in turn)
            line += f", about {_clock_time((now - first) / done * (size - done))} left"
        note(console, f"{line}; now {one_line(description)}")

    return advance


def _clock_time(seconds: float) -> str:
    """0:01:02, as the bar's elapsed and remaining times are written."""
    return str(timedelta(seconds=round(seconds)))
