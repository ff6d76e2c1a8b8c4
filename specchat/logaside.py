"""Where the conversation log really lies (the file a link leads to, as SQLite opens it), and a damaged log moved
aside to logs-damaged-STAMP.db with its -wal and -shm, under a lock kept beside it. Opening the log (logdb.py) holds
that lock off while it checks for a -wal left behind, so a move and an open never cross.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock

BUSY_S = 5.0  # how long a writer waits for another process's transaction (logdb), or its setting the log aside
STAMP = "%Y%m%d-%H%M%S"  # of a damaged log set aside: logs-damaged-STAMP.db, then -2, -3 in the same second
STAMP_LENGTH = len(time.strftime(STAMP, time.gmtime(0)))


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the log, None where there is none: which file was found damaged."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def set_aside(path: Path, seen: tuple[int, int] | None) -> Path | None:
    """Move a damaged log, with its -wal and -shm, to logs-damaged-STAMP.db beside it (SQLite opening that
    name takes its -wal in): nothing is deleted, and the next write starts a new log. A link is kept and the
    file it leads to moved (SQLite keeps the -wal beside that file), so the new log starts where the link
    sends it. None where the file is no longer the one found damaged (`seen`: another specchat set it aside
    first, and may have started a new log there since). Raises OSError."""
    real = resolved(path)
    if seen is None:
        return None
    # Under a lock, checked again inside: two writers that both found it damaged each renamed it, the second
    # one the first one's new log (or failed on a file already gone).
    with _aside_locked(real):
        if file_identity(real) != seen:
            return None
        stamp = time.strftime(STAMP)
        aside = real.with_name(f"{_aside_prefix(real)}{stamp}{real.suffix}")
        number = 1
        while aside.exists():
            number += 1
            aside = real.with_name(f"{_aside_prefix(real)}{stamp}-{number}{real.suffix}")
        try:
            os.rename(real, aside)
        except FileNotFoundError:  # moved by hand, or by a specchat that takes no lock
            return None
        for extra in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(real.with_name(real.name + extra), aside.with_name(aside.name + extra))
    return aside


def set_aside_logs(path: Path) -> list[Path]:
    """The damaged logs set_aside() moved beside the log (where a link leads, as it moves them), oldest first."""
    real = resolved(path)
    prefix = _aside_prefix(real)
    try:
        found = list(real.parent.glob(f"{glob.escape(prefix)}*{glob.escape(real.suffix)}"))
    except OSError:  # a folder that cannot be listed: nothing to name
        return []

    def order(aside: Path) -> tuple[str, int, str]:
        # STAMP, then STAMP-2 ... STAMP-10: by name "-" sorts before ".", and "10" before "2"
        middle = aside.name[len(prefix) : len(aside.name) - len(real.suffix)]
        stamp, number = middle[:STAMP_LENGTH], middle[STAMP_LENGTH + 1 :]
        return stamp, int(number) if number.isdecimal() and number.isascii() else 1, aside.name

    return sorted(found, key=order)


def _aside_prefix(real: Path) -> str:
    """How the names of the log's damaged copies start (logs-damaged-STAMP.db): made and listed by this one."""
    return f"{real.stem}-damaged-"


def resolved(path: Path) -> Path:
    """The file a link leads to (the log on another disk), as SQLite opens it; a link in a loop is itself."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a loop, before Python 3.13
        return path


@contextmanager
def _aside_locked(real: Path) -> Iterator[None]:
    """The lock set_aside() holds. Raises OSError: filelock 3 raises NotImplementedError on a file system
    without flock (some network mounts), which escaped as a traceback after the reply."""
    lock = FileLock(_aside_lock(real))
    try:
        lock.acquire(timeout=BUSY_S)
    except NotImplementedError:
        raise OSError(errno.ENOLCK, "the file system cannot lock files", str(_aside_lock(real))) from None
    try:
        yield
    finally:
        lock.release()


def _aside_lock(real: Path) -> Path:
    """The lock taken while a log is set aside: made the first time one is, beside the log, and kept (a lock
    file removed while another process waits on it would let both in)."""
    return real.with_name(f".{real.name}.lock")


def hold_off_set_aside(real: Path, stack: ExitStack) -> bool:
    """Whether set_aside()'s lock is now held (until the stack closes): only where a log was set aside here before
    (its lock file is kept), and so where another set_aside() might be."""
    return _aside_lock(real).exists() and _hold_off(real, stack)


def _hold_off(real: Path, stack: ExitStack) -> bool:
    """Whether set_aside()'s lock is now held (until the stack closes); not where it cannot be taken (a
    read-only folder, a file system without locks, a set_aside() that takes too long)."""
    if not os.access(real.parent, os.W_OK):
        return False
    try:
        stack.enter_context(_aside_locked(real))
    except OSError:
        return False
    return True


def wait_for_set_aside(real: Path) -> None:
    """Until a set_aside() in progress is done: it moves the log, then its -wal (no lock file: none ever was;
    a read-only folder: none can be, and the lock file could not be opened for writing)."""
    if _aside_lock(real).exists():
        with ExitStack() as stack:
            _hold_off(real, stack)  # taken, then let go at once
