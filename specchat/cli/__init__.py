"""The command line, the only Typer code: it parses options, calls the layers below and renders.

app.py holds the app, the options several commands share and the one error boundary; the commands
are grouped in run.py (run, serve), measure.py (bench, tune) and manage.py (models, pull, logs, export).
"""

from .app import app, main, wrap_help

# isort: off
from . import run, measure, manage  # noqa: F401  (importing them registers their commands, in this order)
# isort: on

wrap_help(app)

__all__ = ["app", "main"]
