"""Signal set-up for tests that play the terminal."""

from __future__ import annotations

import signal


def default_signals() -> None:
    """A test runner started in the background passes SIGINT and SIGQUIT on as ignored (`&` in a script), and
    under nohup SIGHUP too; specchat rightly leaves an ignored signal alone, so tests that send Ctrl-C, Ctrl-\\
    or a closed terminal's SIGHUP reset them in the child."""
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
