"""The command line, the only Typer code: it parses options, calls the layers below and renders.

app.py holds the app and the one error boundary, options.py the options several commands share; the
commands are grouped in run.py (run, serve), measure.py (bench, tune) and manage.py (models, pull, logs, export);
runsteps.py, benchsteps.py and tunesteps.py hold the steps of run, bench and tune.
habits.py refuses other tools' flags (habittable.py: which, and what to say; habitvalues.py: the values
they are given; reading.py: how Click reads the arguments); helpfold.py folds the help tables;
streamencoding.py writes '?' for a character stdout's or stderr's encoding cannot hold;
helptext.py gives each command its help from its docstring; complete.py completes option values on Tab.
"""

import os


def _leave(_signum, _frame) -> None:
    """Ctrl-C while the CLI still imports (~0.7 s), before main's boundary: leave at once, as main does. A
    KeyboardInterrupt raised here could land in importlib's module-lock callback, which swallows it
    ('Exception ignored in ... _get_module_lock'): the command then ran on as if no Ctrl-C had come."""
    try:
        os.write(2, b"interrupted\n")
    finally:  # stderr closed too: the exit code says it
        os._exit(130)


try:
    import signal  # with enum, some milliseconds: a Ctrl-C before _leave is in place comes as KeyboardInterrupt
except KeyboardInterrupt:
    _leave(None, None)


def _leave_on_ctrl_c() -> bool:
    """_leave handles Ctrl-C where it would raise KeyboardInterrupt: an ignored one (a job started with `&`)
    stays ignored, and outside the main thread no handler can be set."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        signal.signal(signal.SIGINT, _leave)
    except ValueError:  # not the main thread
        return False
    return True


_ours = _leave_on_ctrl_c()
try:
    from .app import app, main
    from .helptext import wrap_help

    # isort: off
    from . import run, measure, manage  # noqa: F401  (importing them registers their commands, in this order)
    # isort: on

    wrap_help(app)
finally:
    # From here on main's boundary turns Ctrl-C into `interrupted`, exit 130; a handler that a module set
    # meanwhile is its own, and stays.
    if _ours and signal.getsignal(signal.SIGINT) is _leave:
        signal.signal(signal.SIGINT, signal.default_int_handler)

__all__ = ["app", "main"]
