"""The bench's report: text formats (md, csv, json, jsonl) and where the report goes (a file, a plot,
stdout). The Rich tables are in tableview.py; the measuring is in bench.py; the options and report paths,
checked before it, in benchoptions.py."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from .benchresult import BenchResult, Row, peak_rss_mb
from .errors import SpecchatError
from .paths import disk_full, write_atomic
from .tableview import COLUMNS, bench_table, cost_table, row_cells, speedup_style
from .view import note, one_line, say, stderr_console, stdout_console, write_stdout

FORMATS = ("table", "md", "csv", "json", "jsonl")
# -o with the table on stdout: the file in the format its name says (bench.json held Markdown), else Markdown.
FILE_FORMATS = {".md": "md", ".csv": "csv", ".json": "json", ".jsonl": "jsonl"}


INTERRUPTED = "interrupted (Ctrl-C): this report holds only what was measured before it"
# What n and the interval are over, under the table and the Markdown file: a reader took n for prompts and the
# interval for one that holds for other prompts too (docs/bench.md, "Reading each figure").
LEGEND = (
    "n = replies measured (the prompts' turns x repetitions); tok/s excludes prefill; speedup = median of paired "
    "ratios, with its 95% interval (CI) over these prompts' replies, not what other prompts would give"
)
# The columns a first reader could not tell from the measured speedup without the docs.
COLUMNS_LEGEND = (
    "S(k), S(t/r) = the speedup the cost model predicts from the acceptance rate, from the measured tokens per round; "
    "acc/rnd = accepted draft tokens per round (not counting the target's own); draft% = draft time share; "
    "TTFT = seconds to the first token (median; the target's prefill, which gives it, and a draft model's prefill "
    "where auto has it read a short prompt before that, on a GPU); "
    "every column: docs/bench.md, 'Reading each figure'"
)


def context_note(result: BenchResult) -> str | None:
    """Replies the context cut short: measured all the same (every variant stops where the target alone does),
    but shorter than -n asked, which a reader of the table would not guess."""
    cut = sum(sample.stop_reason == "context" for sample in result.samples)
    if not cut:
        return None
    return (
        f"{cut} of {len(result.samples)} replies ended when the context was full, before --max-tokens "
        "(measured as they ran; --ctx gives them room)"
    )


def to_markdown(result: BenchResult) -> str:
    lines = _md_table([list(map(_md_cell, row_cells(row))) for row in result.rows()])
    if result.interrupted:  # a partial file must not pass for a whole one (json and jsonl say "interrupted")
        lines += ["", f"*{INTERRUPTED}*"]
    if result.skipped:  # json and jsonl have "skipped"
        lines += [""] + [f"- {_md_cell(skipped.text())}" for skipped in result.skipped]
    cut = context_note(result)
    if cut:  # json and jsonl have each sample's stop_reason
        lines += ["", f"*{cut}*"]
    lossless = lossless_line(result)
    if lossless is not None:  # a report pasted into an issue: a MISMATCH (json has "lossless") must not drop out
        lines += ["", f"*{lossless}*"]
    lines += ["", f"*{LEGEND}; {COLUMNS_LEGEND}*"]
    return "\n".join(lines) + "\n"


def lossless_line(result) -> str | None:
    """The lossless check's line, or None where no greedy output was compared."""
    lossless = result.lossless_summary()
    if not lossless["checked"]:
        return None
    return (
        f"lossless check: {lossless['checked']} greedy outputs vs target alone: {lossless['equal']} equal, "
        f"{lossless['near-tie']} diverged at a near-tie, {lossless['MISMATCH']} mismatches"
    )


def _md_table(rows: list[list[str]]) -> list[str]:
    """The table's lines, padded so that its columns line up read as text, the numbers right-aligned (`---:`) as
    the terminal's table and llama-bench's Markdown have them: `|---|` everywhere rendered them left-aligned."""
    widths = [max(cell_len(cells[i]) for cells in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    right = [column not in ("category", "variant") for column in COLUMNS]

    def line(cells: list[str]) -> str:
        padded = [_pad(cell, width, r) for cell, width, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True))
    return [line(COLUMNS), rule + "|", *map(line, rows)]


def _pad(cell: str, width: int, right: bool) -> str:
    fill = " " * (width - cell_len(cell))  # cells, not characters: a category may be written in CJK
    return fill + cell if right else cell + fill


def _md_cell(text: str) -> str:
    """A cell as Markdown keeps it in its column: a category of a --prompts file may hold '|' or a newline."""
    return " ".join(text.replace("|", "\\|").splitlines())


def to_csv(result: BenchResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    fields = list(Row.__dataclass_fields__)
    writer.writerow(fields)
    for row in result.rows():
        writer.writerow([_csv_cell(v) for v in asdict(row).values()])
    return buffer.getvalue()


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value):
    """A CSV cell that a spreadsheet shows as it is: a --prompts file's category such as `=HYPERLINK(...)`
    or `-2+3` would run as a formula, so text that starts like one gets a leading `'` (OWASP's advice).
    Numbers are left alone: -0.5 stays a number."""
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def to_jsonl(result: BenchResult) -> str:
    data = result.as_dict()
    lines = [json.dumps({"type": "sample", **s}) for s in data.pop("samples")]
    lines.append(json.dumps({"type": "summary", **data}))
    return "\n".join(lines) + "\n"


def render(result: BenchResult, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.as_dict(), indent=2) + "\n"
    return {"md": to_markdown, "csv": to_csv, "jsonl": to_jsonl}[fmt](result)


def write(result: BenchResult, fmt: str, output: Path | None, plot: Path | None, ks: list[int]) -> None:
    """The report to --output (with the table on stdout: in the format of its name's suffix, else md), --plot,
    and stdout."""
    err = stderr_console()
    if not result.samples:  # stopped before its first sample: what it would have skipped is still worth knowing
        _say_skipped(err, result)
        err.print("nothing was measured", style="yellow")
        return
    text = None if fmt == "table" else render(result, fmt)
    if output is not None:
        body = text if text is not None else render(result, FILE_FORMATS.get(output.suffix.lower(), "md"))
        try:
            _write_file(output, body)
        except SpecchatError:  # after minutes of measuring the report is not lost: it goes to stdout
            write_stdout(body, "the report")
            raise
        # CSV has no place for INTERRUPTED: the file passed for a whole report, and "wrote" did not say otherwise
        partial = ", interrupted (Ctrl-C): it holds only what was measured before it" if result.interrupted else ""
        note(err, f"wrote {output}{partial}")
    unsaved = None
    if plot is not None:
        try:
            save_speedup_plot(result, plot)
            note(err, f"wrote {plot}")
        except SpecchatError as exc:  # the report on stdout is still written, then this is the error
            unsaved = exc
    if text is not None and output is None:
        write_stdout(text, "the report")
    elif text is None:
        print_bench(stdout_console(what="the report"), result, ks)
    # Under the table, or in Markdown on stdout, it is said already; a file or JSON is not read on the spot.
    if text is not None and not (fmt == "md" and output is None):
        _say_skipped(err, result)
    if unsaved is not None:
        raise unsaved


def _say_skipped(console: Console, result: BenchResult) -> None:
    for skipped in result.skipped:  # a prompt id is the user's text: shown, never obeyed
        say(console, one_line(skipped.text()), style="yellow", highlight=False)


def _write_file(path: Path, body: str) -> None:
    from .paths import write_atomic

    try:
        # into /dev/null or a FIFO, through a link: never replaced by a file; a read-only one is refused
        write_atomic(path, body, keep_read_only=True)
    except OSError as exc:
        # Not a usage error (exit 2): the path was checked before the run; the disk filled up since, or the
        # device refuses writes.
        raise SpecchatError(
            f"cannot write {path}: {exc.strerror or exc}", hint="the report went to stdout instead; check the path"
        ) from None


def print_bench(console: Console, result, ks: list[int]) -> None:
    """The bench report on a console: the table, the cost model, the lossless check, a plot."""
    console.print(bench_table(result))
    if result.interrupted:
        console.print(INTERRUPTED, style="yellow", highlight=False)
    _say_skipped(console, result)
    cut = context_note(result)
    if cut:
        console.print(cut, style="yellow", highlight=False)
    if result.cost is not None:
        console.print(cost_table(result.cost, ks))
    lossless = lossless_line(result)
    if lossless is not None:
        style = "red" if result.lossless_summary()["MISMATCH"] else "green"
        console.print(lossless, style=style, highlight=False)
    else:  # sampled texts differ from run to run by design: a green "0 outputs" read as a check passed
        console.print("lossless check: not made (only greedy outputs can be compared)", style="dim", highlight=False)
    if any(row.k for row in result.rows()) and console.is_terminal:
        console.print(speedup_chart(result))
    peak = peak_rss_mb()
    memory = f"peak memory {peak:.0f} MB; " if peak is not None else ""
    console.print(
        f"{memory}{LEGEND}; uncoloured where that interval holds 1.00x: this run cannot tell it from the target "
        f"alone; {COLUMNS_LEGEND}",
        style="dim",
        highlight=False,
    )


def speedup_chart(result, width: int = 40) -> Text:
    """Speedup per category and variant as horizontal bars (Rich text, no plotting library): green at or
    above the target alone, red below, with a `│` where 1.0 falls."""
    rows = [row for row in result.rows() if row.k and row.speedup is not None]
    chart = Text()
    chart.append("speedup vs the target alone (│ = 1.0x)", style="bold")
    if not rows:
        return chart
    scale = width / max(1.0, *(row.speedup for row in rows))
    one = round(scale)
    labels = [one_line(f"{row.label} {row.variant}") for row in rows]  # a --prompts category, as in the table
    label_width = max(map(len, labels))
    for row, label in zip(rows, labels, strict=True):
        filled = round(row.speedup * scale)
        chart.append(f"\n  {label:<{label_width}} ")
        chart.append("█" * filled, style=speedup_style(row) or "yellow")
        if filled < one:
            chart.append(" " * (one - filled - 1) + "│", style="dim")
        chart.append(f" {row.speedup:.2f}x")
    return chart


def require_matplotlib():
    """matplotlib (the `plot` extra) set up for files, or a usage error saying how to get it."""
    from .errors import UsageError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib", hint="pip install matplotlib (in specchat's clone: pip install '.[plot]')"
        ) from None
    return plt


def save_speedup_plot(result, path) -> None:
    """Speedup vs k per category as PNG or SVG (matplotlib, from the `plot` extra)."""
    plt = require_matplotlib()
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for category, points in result.speedup_series().items():
        axis.plot([k for k, _ in points], [s for _, s in points], marker="o", label=category)
    axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel("draft tokens per round (k)")
    axis.set_ylabel("speedup over target alone (median of paired ratios)")
    axis.set_title(result.meta.get("title", "specchat bench"))
    axis.legend()
    figure.tight_layout()
    image = io.BytesIO()  # drawn in memory, then written whole: matplotlib's own write left an old plot empty
    figure.savefig(image, format=path.suffix.lower()[1:])
    plt.close(figure)
    try:
        write_atomic(path, image.getvalue(), keep_read_only=True)
    except OSError as exc:  # the disk filled up during the run, or the device refuses writes
        # space only where the disk is full: a read-only file system or a FIFO with no reader is not about space
        hint = "free some space or choose another --plot path" if disk_full(exc) else "choose another --plot path"
        raise SpecchatError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from None
