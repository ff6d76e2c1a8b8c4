"""Signal set-up for tests that play the terminal."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A test runner started in the background (nohup, `&` in a script) passes SIGINT on as ignored, and
    specchat rightly leaves an ignored Ctrl-C alone; tests that send Ctrl-C reset it in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
