"""The progress bars of a model file's download and of its sha256 read (`pull`, `models --verify`, a first
`run`), on stderr. Narrowed, a line gives up the bar first, then the middle of the file's name; the words
around the name ("sha256 of", "(PyPI mirror)") and the numbers stay whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.progress import BarColumn, DownloadColumn, Progress, ProgressColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Column
from rich.text import Text

from .terminal import cursor_kept_hidden
from .view import redrawn

BAR_MIN, BAR_MAX = 4, 30


def shortened(label: str, width: int) -> str:
    """The label in width cells: its longest word (the file's name) loses characters from its middle and its
    `.gguf`, as `qwen2.5-coder-1.5b-in…q4_k_m`, the rest kept; cut at the end only where even that does not
    fit. Rich cut the end: at 80 columns `sha256 of qwen2.5-coder-1.…` no longer said which model, nor `(PyPI
    mirror)`."""
    excess = cell_len(label) - width
    if excess <= 0:
        return label
    name = max(label.split(" "), key=len)
    stem = name[: -len(".gguf")] if name.lower().endswith(".gguf") else name  # every model's file is one
    keep = len(name) - excess - 1  # the characters of the name left beside the "…"
    if keep < 6:
        return label
    if keep >= len(stem):  # without its .gguf it fits
        return label.replace(name, f"{stem}…", 1)
    head = keep * 3 // 4  # the start says which model (family, size), the end its quantisation
    return label.replace(name, f"{stem[:head]}…{stem[len(stem) - (keep - head) :]}", 1)


class _Shortened:
    """A label drawn in the width its cell gets (see shortened)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(8, cell_len(self.label)), cell_len(self.label))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(shortened(self.label, options.max_width), no_wrap=True, overflow="ellipsis")


class _Label(ProgressColumn):
    """A download's label on one line (TextColumn's would wrap)."""

    def render(self, task) -> _Shortened:
        return _Shortened(task.description)


class _BarsLast(Progress):
    """Rich narrows the widest columns first, the label and the bar alike: the label was cut to `qwen2.5-coder-1.…`
    beside a bar 28 columns wide. The bar takes what the labels and the numbers leave (4 to 30 columns)."""

    def make_tasks_table(self, tasks):
        table = super().make_tasks_table(tasks)
        bars = [index for index, column in enumerate(self.columns) if isinstance(column, BarColumn)]
        if not bars or not table.row_count:  # no task yet (as Live is made, before self.live is)
            return table
        options = self.console.options
        widths = [
            max((Measurement.get(self.console, options, cell).maximum for cell in column.cells), default=0)
            for index, column in enumerate(table.columns)
            if index != bars[0]
        ]
        room = options.max_width - sum(widths) - len(table.columns) + 1  # a space between columns
        table.columns[bars[0]].width = max(BAR_MIN, min(BAR_MAX, room))
        return table


@contextmanager
def download_progress(console: Console) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """Yields start(label, total) -> advance(n): one bar per file, on stderr (a terminal only: view.redrawn).
    Where the line is too narrow, the bar gives way, then the file's name (…); the numbers stay whole: with
    Rich's defaults an 80-column terminal wrapped the default pair's `GB` onto a line of its own. Below 64
    columns the bar and the speed are left out, so that the name keeps a few characters."""
    whole = Column(no_wrap=True)
    columns = [
        _Label(table_column=Column(min_width=8)),  # wrappable columns are the ones Rich narrows
        BarColumn(bar_width=None, table_column=Column(min_width=BAR_MIN, max_width=BAR_MAX)),
        DownloadColumn(table_column=whole),
        TransferSpeedColumn(table_column=whole),
        TimeRemainingColumn(table_column=whole),
    ]
    if console.width < 64:
        del columns[3], columns[1]
    progress = _BarsLast(*columns, console=console, transient=False, disable=not redrawn(console))

    hidden = ExitStack()

    def start(label: str, total: int) -> Callable[[int], None]:
        if not progress.live.is_started and not progress.disable:
            progress.start()  # only when something is downloaded: no empty live region otherwise
            hidden.enter_context(cursor_kept_hidden(console))  # again on `fg` after Ctrl-Z
        task = progress.add_task(label, total=total)
        return lambda n: progress.advance(task, n)

    try:
        yield start
    finally:
        hidden.close()
        if progress.live.is_started:
            progress.stop()
