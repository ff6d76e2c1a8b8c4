"""Help text as Typer is given it: each command's help from its docstring, reflowed to the terminal, and a flag's
type column left empty. (helpfold.py folds the tables where they would cut.)"""

from __future__ import annotations

import inspect

import typer


def untyped_flags(params: list) -> list:
    """Typer's help shows each option's type, `<bool>` for flags too, which reads as if `--stats` took a
    value: a flag's type column is left empty. (By attribute: Typer 0.29 carries its own copy of click.)"""
    for param in params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    return params


def _reflow(doc: str) -> str:
    """A docstring as help text: paragraphs kept, line breaks inside them joined, so that Rich wraps
    the text to the terminal's width (Typer's rich mode keeps them: a 100-column source line wrapped
    on an 80-column terminal left a ragged line after every one)."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in doc.split("\n\n"))


def wrap_help(typer_app: typer.Typer) -> None:
    """Every command's help from its docstring, reflowed (see _reflow)."""
    for command in typer_app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = _reflow(inspect.cleandoc(command.callback.__doc__))
