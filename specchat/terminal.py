"""The terminal's state around specchat's output: the cursor a live region hides (hidden again on `fg` after
Ctrl-Z), colours and cursor put back after Ctrl-C or a fatal signal, and stdin's modes (no echo while a reply
or a load runs, the shell's modes back on exit or Ctrl-Z)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

# The terminals (file descriptors) whose cursor a live region holds hidden now: after Ctrl-Z it was shown for the
# shell, and on `fg` the region drew on with it shown, blinking over the footer, until it ended
_HIDDEN_CURSORS: list[int] = []


@contextmanager
def cursor_kept_hidden(console: Console) -> Iterator[None]:
    """Around a started Rich Live (which hid the cursor on a terminal): on `fg` after Ctrl-Z it is hidden again."""
    try:
        fd = console.file.fileno() if console.is_terminal else None
    except (OSError, ValueError, AttributeError):
        fd = None
    try:
        if fd is not None:  # inside the try: a Ctrl-C right after it would leave the fd for every later `fg`
            _HIDDEN_CURSORS.append(fd)
        yield
    finally:
        if fd in _HIDDEN_CURSORS:
            _HIDDEN_CURSORS.remove(fd)


def restore_terminal() -> None:
    """After Ctrl-C: colours reset, cursor shown (a live region may have hidden it)."""
    if sys.stderr.isatty():
        sys.stderr.write("\x1b[0m\x1b[?25h")
        sys.stderr.flush()


def restore_terminal_when_killed() -> None:
    """On SIGTERM (`kill`, `timeout`), SIGHUP or SIGQUIT (Ctrl-\\), put the terminal back, then end as the
    signal's default action does (exit status 128 + N): that action alone left the chat's shell in
    prompt_toolkit's raw mode (no echo, no line editing) and a reply's cursor hidden. The same before SIGTSTP
    (Ctrl-Z) stops it. A signal the parent ignores (nohup) stays so."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal() works there only
        return
    modes = _terminal_modes()

    def restore_and_die(signum, _frame) -> None:
        with suppress(Exception):  # termios.error is no OSError; nothing here may keep the process alive
            _put_back(modes)
            if sys.stderr.isatty():
                sys.stderr.write("\x1b[?2004l")  # prompt_toolkit's bracketed paste, off as it leaves
            restore_terminal()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def restore_and_stop(signum, _frame) -> None:
        """Ctrl-Z during a reply (the chat's prompt reads it as a key): the shell gets its terminal with the
        cursor shown; on `fg` the modes of the moment come back (a reply's unechoed keys)."""
        during = _terminal_modes()
        with suppress(Exception):
            _put_back(modes)
            restore_terminal()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # stopped here, until continued
        signal.signal(signum, restore_and_stop)
        with suppress(Exception):
            _put_back(during)
            for fd in tuple(_HIDDEN_CURSORS):  # a copy: the list may change while the handler runs
                os.write(fd, b"\x1b[?25l")

    handlers = {"SIGTERM": restore_and_die, "SIGHUP": restore_and_die, "SIGQUIT": restore_and_die}
    handlers["SIGTSTP"] = restore_and_stop
    for name, handler in handlers.items():
        signum = getattr(signal, name, None)  # Windows has only SIGTERM
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, handler)


@contextmanager
def keys_unechoed(*, dropped_on_error: bool = False) -> Iterator[None]:
    """stdin's terminal does not echo what is typed in here (the chat between two prompts, the models' load): an
    echoed Enter moved the cursor under Rich's live region, which then left a stale copy of its lines on the screen.
    What is typed stays in the terminal's queue for the next prompt, which shows it (TCSANOW: nothing is flushed).
    Ctrl-D is no end-of-file key in here: the terminal made it a NUL byte, which the next prompt swallowed;
    kept as the key itself, it leaves there (on an empty line), as a shell does with one typed during a command.
    dropped_on_error: what was typed is discarded if the block fails, where no prompt of ours comes next (the
    models' load): the shell read it, and a Ctrl-D there, a literal 0x04 on an empty line, closed bash."""
    modes = _terminal_modes()
    if modes is None or not _foreground():
        yield
        return
    import termios

    keys = list(modes[6])
    with suppress(OSError, ValueError):  # _POSIX_VDISABLE: 0 on Linux, 0xff on macOS
        disabled = os.fpathconf(sys.stdin.fileno(), "PC_VDISABLE")
        if 0 <= disabled <= 0xFF:
            keys[termios.VEOF] = bytes([disabled])
    quiet = [*modes[:3], modes[3] & ~termios.ECHO, *modes[4:6], keys]
    with suppress(termios.error, OSError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, quiet)
    failed = True
    try:
        yield
        failed = False
    finally:
        with suppress(termios.error, OSError, ValueError):
            if _foreground():  # put back by the shell already if the chat was stopped (Ctrl-Z) and resumed
                if failed and dropped_on_error:
                    termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, modes)


@contextmanager
def caret_c_ended() -> Iterator[None]:
    """A Ctrl-C in here (a one-shot reply's load, where nothing is drawn) ends the line where the terminal echoed
    it as ^C: the note after it stood glued to it ("^Cinterrupted"). Not the echo of control keys turned off: an
    arrow key typed meanwhile was then echoed as the escape that moves the cursor."""
    try:
        yield
    except KeyboardInterrupt:
        # the terminal's modes read through stderr, where the note goes: stdin may be a pipe (`cat f | specchat
        # run "..."`), and the terminal echoes ^C all the same
        modes = _terminal_modes(sys.stderr)
        if modes is not None:
            import termios

            if modes[3] & termios.ECHO and modes[3] & getattr(termios, "ECHOCTL", 0):
                sys.stderr.write("\n")
        raise


def _foreground() -> bool:
    """In the terminal's foreground process group: a background process setting its modes would be stopped."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _terminal_modes(stream=None) -> list | None:
    """The terminal modes (termios) of stdin (or `stream`), or None: not a terminal, or no termios (Windows)."""
    try:
        import termios

        return termios.tcgetattr((stream or sys.stdin).fileno())
    except Exception:  # ImportError, termios.error (no OSError), a closed or missing stdin
        return None


def _put_back(modes: list | None) -> None:
    """stdin's terminal modes as they were, where they changed; only in the foreground, where a background
    process setting them would be stopped (SIGTTOU) instead of ending."""
    if modes is None:
        return
    import termios

    fd = sys.stdin.fileno()
    if termios.tcgetattr(fd) != modes and os.tcgetpgrp(fd) == os.getpgrp():
        termios.tcsetattr(fd, termios.TCSANOW, modes)
