"""Typer's help tables, folded where they would cut: option names whole, a long word onto the next line, a flag's
negative name under its own. Only where help is shown (app.py's SpecchatGroup and each command's help)."""

from __future__ import annotations

from ..view import guard_stdout


def folded_help() -> None:
    """Typer's help tables cut what does not fit with an ellipsis: on an 80-column terminal `run --help` showed
    `--draft-gpu-laye…` and `SPECCHAT_NO_HIST…`. Option names are kept whole (the description column wraps
    instead) and a word longer than its column is folded onto the next line. Only where help is shown:
    Typer's help module costs ~35 ms to import."""
    from rich.table import Table
    from typer import rich_utils

    class FoldingTable(Table):
        def add_row(self, *renderables, **kwargs):
            if len(renderables) < 6:  # the commands table (name, description) wraps as it is
                super().add_row(*renderables, **kwargs)
                return
            super().add_row(*_negatives_below(renderables), **kwargs)
            for index, column in enumerate(self.columns):  # names whole (all but the type and help columns)
                column.no_wrap, column.overflow = index < len(self.columns) - 2, "fold"
            for item in getattr(renderables[-1], "renderables", renderables[-1:]) if renderables else ():
                if hasattr(item, "overflow"):
                    item.overflow = "fold"

    if getattr(rich_utils, "Table", None) is Table:  # a later Typer that renders otherwise is left alone
        rich_utils.Table = FoldingTable


def _negatives_below(row: tuple) -> tuple:
    """An options row, [required,] long, short, negative long, negative short, type, help, with each negative
    name under its own (`--no-rejected` under `--rejected`). In columns of their own the negatives took 15 of a
    60-column terminal's columns from every option's help, 7 left: `specch|at`, `measure|d`."""
    from rich.text import Text

    *head, long, short, negative_long, negative_short, kind, text = row

    def below(name, negative):
        return Text.assemble(name, "\n", negative) if str(negative) else name

    return (*head, below(long, negative_long), below(short, negative_short), kind, text)


def with_folded_help(format_help):
    def format_folded(ctx, formatter):
        folded_help()
        return guard_stdout(lambda: format_help(ctx, formatter), "the help")  # Typer prints it to stdout

    return format_folded
