"""Signal set-up for tests that play the terminal."""

from __future__ import annotations

import signal


def default_signals() -> None:
    """A test runner started in the background passes SIGINT on as ignored (`&` in a script), and under
    nohup SIGHUP too; specchat rightly leaves an ignored signal alone, so tests that send Ctrl-C or a
    closed terminal's SIGHUP reset both in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
