"""The command line, the only Typer code: it parses options, calls the layers below and renders.

app.py holds the app, the options several commands share and the one error boundary; the commands
are grouped in run.py (run, serve), measure.py (bench, tune) and manage.py (models, pull, logs, export).
"""

try:
    from .app import app, main, wrap_help

    # isort: off
    from . import run, measure, manage  # noqa: F401  (importing them registers their commands, in this order)
    # isort: on
except KeyboardInterrupt:  # Ctrl-C while the CLI still imports (~0.7 s), before main's boundary: no traceback
    import sys

    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None

wrap_help(app)

__all__ = ["app", "main"]
