"""The bench's report: text formats (md, csv, json, jsonl) and where the report goes (a file, a plot,
stdout). The Rich tables are in tableview.py; the measuring is in bench.py."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from dataclasses import asdict
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from .benchresult import BenchResult, Row, peak_rss_mb
from .errors import SpecchatError, UsageError
from .paths import disk_full, resolve_link, same_file, write_atomic
from .tableview import COLUMNS, bench_table, cost_table, row_cells, speedup_style
from .view import note, one_line, say, stderr_console, stdout_console, write_stdout

FORMATS = ("table", "md", "csv", "json", "jsonl")
# -o with the table on stdout: the file in the format its name says (bench.json held Markdown), else Markdown.
FILE_FORMATS = {".md": "md", ".csv": "csv", ".json": "json", ".jsonl": "jsonl"}


def check_options(fmt: str, plot: Path | None, output: Path | None, ks: str, modes: str) -> tuple[list[int], list[str]]:
    """`specchat bench`'s options, checked before anything is loaded; returns (ks, modes)."""
    from .bench import BENCH_MODES

    if fmt not in FORMATS:
        raise UsageError(f"unknown --format '{fmt}'", hint=f"choose one of: {', '.join(FORMATS)}")
    _check_suffix(fmt, output)
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--plot {plot}: use a .png or .svg file name", hint="e.g. --plot bench.svg")
    try:
        k_list = sorted({int(part) for part in _items("--ks", ks)})
    except ValueError:
        raise UsageError(f"--ks '{ks}' is not a list of integers", hint="e.g. --ks 1,2,4,8") from None
    if not k_list:  # `--ks ""` (an unset variable): said as "every k must be 1..16", which it broke nowhere
        raise UsageError(
            f"--ks '{ks}' names no draft length: it takes the draft model's lengths, comma-separated",
            hint="e.g. --ks 1,2,4,8 (each 1..16); to measure no draft model, leave spec out of --modes",
        )
    if any(not 1 <= k <= 16 for k in k_list):
        raise UsageError(f"--ks '{ks}': every k must be 1..16", hint="k = 0 is the target alone, always included")
    mode_list = list(dict.fromkeys(_items("--modes", modes)))  # each once, in order
    subset = f"a comma-separated subset of {', '.join(BENCH_MODES)}"
    if not mode_list:
        raise UsageError(
            f"--modes '{modes}' names no mode: it takes the modes to compare with the target alone",
            hint=f"{subset}, e.g. --modes spec,ngram,auto (the target alone is always measured)",
        )
    unknown = [m for m in mode_list if m not in BENCH_MODES]
    if unknown:
        always = " (the target alone is always measured, as the baseline)" if unknown[0] == "target" else ""
        raise UsageError(f"--modes '{modes}': unknown mode '{unknown[0]}'{always}", hint=subset)
    for option, path in (("-o/--output", output), ("--plot", plot)):
        if path is not None:
            _check_writable(path, option)
    if plot is not None and "spec" not in mode_list:
        raise UsageError(f"--plot {plot}: it draws the draft model's speedup vs k", hint="add spec to --modes")
    if plot is not None:
        require_matplotlib()  # fail before a long run, not after it
    return k_list, mode_list


def _check_suffix(fmt: str, output: Path | None) -> None:
    """`-f json -o x.csv` wrote JSON into a file whose name says CSV, without a word (a spreadsheet then read it as
    one column): said before measuring, as a --plot name that is no .png or .svg is. A name no report format
    claims (`-o report.txt`) is the user's choice; with the table the name chooses the file's format. Both
    spellings are named: click keeps no record of which one was typed, and `--format json` read as `-f`."""
    named = FILE_FORMATS.get(output.suffix.lower()) if output is not None else None
    if fmt != "table" and named is not None and named != fmt:
        raise UsageError(
            f"-f/--format {fmt} and -o/--output {output} disagree: a {output.suffix} name says {named}",
            hint=f"-f {named} -o {output}, or -f {fmt} -o {output.with_suffix('.' + fmt)}; nothing was run",
        )


def _items(option: str, text: str) -> list[str]:
    """A comma-separated list's items, stripped. An empty one (`--ks 1,,2`, a trailing comma) was dropped
    without a word, as if the list had been typed so: a slip that left out a value ran without it. A list
    of nothing but empty items is left to the caller, which says what the option takes."""
    parts = [part.strip() for part in text.split(",")]
    items = [part for part in parts if part]
    if items and len(items) < len(parts):
        where = "at the end" if not parts[-1] else "at the start" if not parts[0] else "between two commas"
        raise UsageError(
            f"{option} '{text}' has an empty item ({where})",
            hint=f"separate the items with single commas: {option} {','.join(items)}",
        )
    return items


def check_inputs_kept(output: Path | None, plot: Path | None, inputs: dict[str, Path | None]) -> None:
    """-o or --plot naming an input (--prompts, --history, a model file) or each other would overwrite it at the end."""
    from .benchjsonl import is_stdin

    for option, written in (("--output", output), ("--plot", plot)):
        others = {**inputs, "--plot": plot} if option == "--output" else inputs
        for name, read in others.items():
            if read is None or is_stdin(read):  # `--prompts -` reads stdin, not a file `-`
                continue
            # -o and --plot may name one file that does not exist yet: the plot replaced the report, both "wrote"
            if written is not None and same_file(written, read):
                raise UsageError(f"{option} {written} is the {name} file", hint="write the report elsewhere")


def _check_writable(path: Path, option: str) -> None:
    """A report path that cannot be written fails now, not after a run of many minutes whose report it loses."""
    import tempfile

    from .paths import is_special

    if str(path) == "-":  # a file named `-` was written, where `-` means stdout to most tools
        hint = "give a file name; the report goes to stdout with -f md, csv, json or jsonl and no -o"
        raise UsageError(f"{option} - would write a file named -", hint=hint)

    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{path}: the directory does not exist", hint="create it first; nothing was run")
    if path.is_dir():
        raise UsageError(f"{path} is a directory", hint="give a file name, e.g. bench.md; nothing was run")
    try:
        resolve_link(path)
    except OSError as exc:  # a loop of symbolic links: found after the run, the report was lost
        raise UsageError(f"cannot write {path}: {exc.strerror}", hint="check the path; nothing was run") from None
    # /dev/null, a FIFO: written into, so its own permission is what counts; a read-only file is not replaced
    if (is_special(path) or path.is_file()) and not os.access(path, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied", hint="check the path; nothing was run")
    if is_special(path):
        return
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".specchat-probe-"):
            pass
    except OSError as exc:
        # The folder exists (checked above): ENOENT there means a file system that takes no new files
        # (/proc, /sys), and "No such file or directory" would not be true.
        reason = f"{folder} takes no new files" if exc.errno == errno.ENOENT else exc.strerror or exc
        raise UsageError(
            f"cannot write {path}: {reason}",
            hint="it is written through a new file beside it: choose another directory; nothing was run",
        ) from None


INTERRUPTED = "interrupted (Ctrl-C): this report holds only what was measured before it"
# What n and the interval are over, under the table and the Markdown file: a reader took n for prompts and the
# interval for one that holds for other prompts too (docs/bench.md, "Reading each figure").
LEGEND = (
    "n = replies measured (the prompts' turns x repetitions); tok/s excludes prefill; speedup = median of paired "
    "ratios, with its 95% interval (CI) over these prompts' replies, not what other prompts would give"
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
    lines += ["", f"*{LEGEND}*"]
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
        f"{memory}{LEGEND}; uncoloured where that interval holds 1.00x: this run cannot tell it from the target alone",
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
