"""The tables of `bench` and `tune` (Rich), and the one-line summary of a calibration; the consoles and the
other lines are view.py's, statsview.py's and progressview.py's, the table of `models` modelsview.py's."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .view import one_line

COLUMNS = [
    "category",
    "variant",
    "n",
    "tok/s",
    "speedup",
    "95% CI",
    "S(k)",
    "S(t/r)",
    "accept",
    "acc/rnd",
    "draft%",
    "TTFT",
]


def row_cells(row) -> list[str]:
    """A benchresult.Row as the text of its cells (the table, Markdown)."""

    def fmt(value, pattern):
        return pattern.format(value) if value is not None else "-"

    return [
        row.label,  # the category, with "turn N" where its records have several turns
        row.variant,
        str(row.n),
        fmt(row.tokens_per_s, "{:.1f}"),
        fmt(row.speedup, "{:.2f}x"),
        f"{row.speedup_low:.2f}-{row.speedup_high:.2f}" if row.speedup_low is not None else "-",
        fmt(row.predicted_speedup, "{:.2f}x"),
        fmt(row.cost_model_speedup, "{:.2f}x"),
        fmt(row.acceptance_rate, "{:.0%}"),
        fmt(row.mean_accepted_length, "{:.2f}"),
        fmt(row.draft_share, "{:.0%}"),
        f"{row.ttft_s:.2f}",
    ]


def speedup_style(row) -> str | None:
    """Green or red only where this run tells the variant apart from the target alone: its speedup's 95%
    interval lies above or below 1.00x (with too few pairs for an interval, by the median alone)."""
    if row.speedup is None or row.variant == "target":
        return None
    if row.speedup_low is None:
        return "green" if row.speedup >= 1.0 else "red"
    return "green" if row.speedup_low >= 1.0 else "red" if row.speedup_high < 1.0 else None


def bench_table(result) -> Table:
    table = Table(title="specchat bench: target alone vs speculative (same run, interleaved)", title_justify="left")
    # one_line: a --prompts category is the user's text; ESC in it would act on the terminal, a newline split the row
    rows = [(row, [one_line(cell) for cell in row_cells(row)]) for row in result.rows()]
    widths = [max([cell_len(column)] + [cell_len(cells[i]) for _, cells in rows]) for i, column in enumerate(COLUMNS)]
    for column, width in zip(COLUMNS, widths, strict=True):
        left = column in ("category", "variant")
        # As wide as its widest cell: narrower than the table (a pipe, 80 columns) lines wrap, but no cell
        # is cut to "revision tur…" or "ngram k…" (which turn? which variant?).
        table.add_column(column, justify="left" if left else "right", no_wrap=True, min_width=width)
    # And the table as wide as its columns (a padding of 1 each side, a border between and around them): fitted
    # to a narrower console, Rich took the excess from every column alike, and `n` (1 wide) was gone.
    table.width = sum(widths) + 3 * len(COLUMNS) + 1
    previous = None
    for row, texts in rows:
        cells = [Text(cell) for cell in texts]
        style = speedup_style(row)
        if style:
            cells[4].stylize(style)
        if previous is not None and previous != row.label:
            table.add_section()
        previous = row.label
        table.add_row(*cells)
    return table


def cost_table(costs, ks) -> Table:
    """costmodel.Costs as measured by the bench: step times and the ratios c and v(n)."""
    table = Table(title="cost model measured on this machine", title_justify="left", caption_justify="left")
    table.caption = f"batches measured up to {max(costs.verify)}"
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
    for drafter, (batch, speedup) in costs.ceilings().items():
        table.add_row(f"{drafter}, every guess right", ceiling(batch, speedup))
    return table


def ceiling(batch: int, speedup: float) -> str:
    """What perfect guesses would give within the measured batch sizes: why a CPU, where a batch of 16 costs
    several target steps, cannot reach a GPU's gains."""
    return f"at most {speedup:.2f}x (batch of {batch})" if batch > 1 else "1.00x (drafting never pays)"


def tune_table(title: str, estimates) -> Table:
    table = Table(title=Text(f"specchat tune: {one_line(title)}"), title_justify="left")  # a file name: no markup
    rows = []
    for e in estimates:
        accept = f"{e.acceptance:.0%}" if e.acceptance is not None else "-"
        drafting = f"{e.drafting_speedup:.2f}x" if e.drafting_speedup is not None else "-"
        rows.append([e.mode, accept, str(e.k), f"{e.predicted_speedup:.2f}x", str(e.best_drafting_k or "-"), drafting])
    headers = ("mode", "acceptance", "best k", "predicted", "best k >= 1", "predicted if drafting")
    for index, column in enumerate(headers):
        # At least as wide as its widest cell: in a narrow pane the headers give way (…), never a number (`1.…`).
        widest = max((len(row[index]) for row in rows), default=1)
        table.add_column(column, justify="left" if column == "mode" else "right", min_width=widest)
    for row in rows:
        table.add_row(*row)
    return table


def print_tune(
    console: Console, title: str, tuning, estimates, path: Path | None, previous=None, *, kept: bool = False
) -> None:
    """kept: measured under load beside a trusted tuning, whose costs tuningsave.worth_saving keeps (with the acceptance
    measured now, when it saved: path)."""
    console.print(tune_table(title, estimates))
    console.print(f"now:   {cost_summary(tuning.costs)}", highlight=False)
    if previous is not None:
        state = "stale" if previous.stale else previous.source  # a busy one: cost_summary says so too
        console.print(f"saved: {cost_summary(previous.costs, state)}", highlight=False)
    ceilings = ", ".join(f"{drafter} {ceiling(*best)}" for drafter, best in tuning.costs.ceilings().items())
    console.print(f"if every guess were right: {ceilings}", highlight=False)
    best = max(estimates, key=lambda e: e.predicted_speedup)
    verdict = "the target alone" if best.mode == "target" else f"{best.mode} (k={best.k})"
    if kept and path is not None:
        line = (
            "measured under load: the saved costs, measured on a quiet machine, are kept, with the acceptance "
            f"measured now; best here now: {verdict}; saved to {path}"
        )
    elif kept:
        line = f"measured under load: not saved; the saved tuning, measured on a quiet machine, is kept ({verdict} now)"
    elif tuning.costs.busy:  # not trusted (tuning.trusted): run measures its costs again, export takes its defaults
        line = (
            "measured under load: auto starts from a new measurement of the costs at its next start and export "
            f"from its defaults (run tune again when idle); best here now: {verdict}; saved to {path}"
        )
    else:
        line = f"on this machine auto starts from: {verdict}; saved to {path}"
    console.print(line, markup=False, highlight=False)


def cost_summary(costs, origin: str = "") -> str:
    """One line of a calibration: the target step, c and a few v(n), as tune shows saved vs now; origin (where a
    saved one came from) and a busy machine in one bracket (two in a row read as a stutter)."""
    c_text = f", c = {costs.c:.2f}" if costs.c is not None else ""
    ratios = ", ".join(f"v({n}) = {costs.v(n):.2f}" for n in (2, 5, 9, 16, 64))
    busy = "other programs were using the CPUs" if costs.busy else ""
    notes = "; ".join(note for note in (origin, busy) if note)
    return f"target step {costs.calibrated_step_s * 1000:.1f} ms{c_text}, {ratios} target steps" + (
        f" ({notes})" if notes else ""
    )


def tune_json(resolved, tuning, estimates, path: Path | None, previous=None, *, kept: bool = False) -> str:
    """`tune --json`: what the table and the lines under it say, as one object (docs/modes.md names its keys)."""
    from .paths import path_text
    from .view import stdout_json

    def costs(measured) -> dict:
        data = measured.as_dict()
        return {key: data[key] for key in ("source", "step_s", "c", "v", "busy", "stale", "priors")}

    best = max(estimates, key=lambda e: e.predicted_speedup)
    # keys as bench's cost_model.ceiling has them (draft_model): one name per drafter in every JSON
    ceilings = {key: {"batch": batch, "speedup": gain} for key, (batch, gain) in tuning.costs.ceilings_keyed().items()}
    report = {
        "pair": resolved.pair,
        "target": path_text(resolved.target),
        "draft": None if tuning.costs.draft_step is None else path_text(resolved.draft),
        "machine": tuning.machine,  # bench's meta.machine's cpu, cpus and usable_cpus, and the threads used
        "estimates": [dict(vars(estimate)) for estimate in estimates],
        "now": costs(tuning),
        "saved": None if previous is None else costs(previous),
        "ceilings": ceilings,
        "best": {"mode": best.mode, "k": best.k},
        "kept_saved_costs": kept,
        "path": None if path is None else path_text(path),
    }
    return stdout_json(report, indent=2) + "\n"
