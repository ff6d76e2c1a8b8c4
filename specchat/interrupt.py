"""Ctrl-C during generation: a flag while llama.cpp runs, a KeyboardInterrupt once it has returned."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Interrupt:
    """Ctrl-C that can stop a running llama_decode (or model load) through llama.cpp's callbacks.

    Python runs signal handlers only between bytecodes. While llama.cpp runs, the only Python that runs
    is our abort/progress callback (engine.py's, which return `requested`), and an exception raised there
    is swallowed by ctypes, so around every native call (`native()`) Ctrl-C merely sets a flag: the
    callback returns it, ggml stops between graph nodes, and the flag becomes a KeyboardInterrupt once
    the call has returned.
    """

    def __init__(self) -> None:
        self.requested = False
        self.raised = False  # this generation has had its KeyboardInterrupt: more presses only set `requested`
        # Set by the chat: once a generation has returned (whole, or stopped by Ctrl-C), Ctrl-C is ignored until
        # the chat's step ends, so a press then (a second one, as users press it) cannot cut the reply's
        # wind-down (the view closing, its logging) and lose the reply with its message.
        self.settle = False
        self._settled = False  # SIGINT is ignored by the settling above, not by the shell

    def _flag(self, _signum, _frame) -> None:
        self.requested = True

    def _raise(self, _signum, _frame) -> None:
        self.requested = True
        if not self.raised:  # a press while the first one's stop unwinds would escape the code that catches it
            self.raised = True
            raise KeyboardInterrupt

    @contextmanager
    def _handling(self, handler, *, settling: bool = False) -> Iterator[None]:
        """`handler` for SIGINT inside; then as it was, or with `settling`, ignored where it was ours."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, handler)
        # Ignored before: started in the background by a shell, Ctrl-C is not ours; unless the chat's settling
        # ignored it after an earlier generation of the same step (then Ctrl-C is ours, and stops this one).
        ours = previous is not signal.SIG_IGN or (settling and self._settled)
        if not ours:
            signal.signal(signal.SIGINT, previous)
        try:
            yield
        finally:
            if settling:  # no moment with the default handler between the generation and the chat's wind-down
                self._settled = ours and previous in (signal.default_int_handler, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN if settling and self._settled else previous)

    @contextmanager
    def armed(self) -> Iterator[None]:
        """A fresh start for one generation: an older Ctrl-C that was already handled is forgotten. In the chat
        (settle), Ctrl-C is then ignored until the chat's step ends (and put back by the chat)."""
        self.requested = self.raised = False
        try:
            with self._handling(self._raise, settling=self.settle):
                yield
        finally:  # a press after the stop (only flagged) must not abort a later call into llama.cpp
            self.requested = False

    def native(self, stop: Callable[[], None] | None = None):
        """Around one call into llama.cpp: Ctrl-C only sets the flag that the callbacks return. stop: a library's
        own way to be cut short, called on the press as well (SQLite's interrupt(), which polls no flag)."""
        if stop is None:
            return self._handling(self._flag)

        def flag_and_stop(signum, frame) -> None:
            self._flag(signum, frame)
            stop()

        return self._handling(flag_and_stop)

    def check(self) -> None:
        if self.requested:
            self.requested = False
            self.raised = True
            raise KeyboardInterrupt
