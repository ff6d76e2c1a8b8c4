"""`specchat bench`'s options and report paths, checked before anything is loaded or measured: a slip in
them said after a run of many minutes lost that run. The report itself is written by benchreport.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .benchreport import FILE_FORMATS, FORMATS, require_matplotlib
from .errors import UsageError
from .filechecks import same_file
from .paths import resolve_link


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
