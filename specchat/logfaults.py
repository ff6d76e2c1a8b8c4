"""What goes wrong with the conversation log's file (another program's database, a newer specchat's log, a -wal
left without its log, a lock, a full disk, a read-only folder, a damaged file), and the hint that fits each: for
reading it (logdb.reading) and for the warning of a reply that was not logged.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from .errors import SpecchatError
from .logaside import resolved
from .paths import LEADS_BACK, NotAFolder, dead_link, moved_by, nearest_existing, writable

HINT = "move the file aside, and its -wal if there is one (a new log is started)"
# Reading (`logs`, `run -c`, `--cid`, /load) needs the log itself: --no-log cannot help there, and a log
# that is only locked is not broken, so moving it aside would start a new one for nothing.
READ_HINT = (
    "move the file aside, and its -wal if there is one (a new log is started; `specchat logs --path` prints where)"
)
DAMAGED_READ_HINT = (  # set_aside() does it on the next write: the user need not
    "the next logged reply moves it aside and starts a new log; or move it yourself, with its -wal if there is"
    " one (`specchat logs --path` prints where)"
)
READ_ONLY_WAL_HINT = (
    "the log or its folder is read-only, and its -wal holds messages SQLite must write there to read: make them"
    " writable, or copy the log and its -wal to a writable folder and point SPECCHAT_DATA_DIR there"
)
LOCKED_HINT = "another specchat is writing to it; try again when that one is done"
FULL_BYTES = 1 << 20  # less room than this beside the log: SQLite's "disk I/O error" is a full disk (no -shm made)
LINK_HINT = "mount the disk it leads to, or fix or remove the link (`specchat logs --path` prints where it is)"
FOREIGN_HINT = "set SPECCHAT_DATA_DIR to a folder of specchat's own"
LEFT_HINT = "move it next to that log, named as it with -wal added (old.db: old.db-wal), or delete it"
NEWER_HINT = "upgrade specchat to read and write it (nothing in it was changed), or set SPECCHAT_DATA_DIR elsewhere"


class LogError(SpecchatError):
    """The conversation log cannot be read, or has no such conversation."""


class ForeignDatabase(sqlite3.DatabaseError):
    """Another program's database lies where the log should be: it is neither read nor changed."""


class LeftoverWal(sqlite3.DatabaseError):
    """A -wal file with no log to go with it: the log was moved aside (or emptied) after a process that wrote it
    died, and the file holds that log's latest messages. SQLite deletes such a file when it starts a new log."""


class NewerLog(sqlite3.DatabaseError):
    """A log that a newer specchat set up: its tables may have another shape, so it is neither read nor changed."""


class NotSetAside(sqlite3.DatabaseError):
    """A damaged log that could not be moved aside (a read-only folder): the warning said only why the move
    failed ("Permission denied"), not that the log is damaged."""

    def __init__(self, exc: BaseException, why: BaseException) -> None:
        super().__init__(f"it is damaged ({reason(exc)}) and could not be moved aside: {reason(why)}")


HINTS = {
    ForeignDatabase: FOREIGN_HINT,
    NewerLog: NEWER_HINT,
    LeftoverWal: LEFT_HINT,
}  # neither is damage: moving it aside is no fix


def damaged(exc: BaseException) -> bool:
    """SQLite found the log itself damaged: a page overwritten in the middle ("database disk image is
    malformed") or a garbled header ("file is not a database"). Not a lock, a full disk, nor a database that is
    not specchat's (ForeignDatabase and the others carry no SQLite error code)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in DAMAGE_CODES


DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def full_hint(path: Path) -> str | None:
    """Where the disk that holds the log is full, what to do: moving the log aside (the hint otherwise) starts a
    new log that this disk cannot hold either. None: there is room, or no telling."""
    folder = nearest_existing(resolved(path).parent)
    try:
        full = shutil.disk_usage(folder).free < FULL_BYTES
    except OSError:
        return None
    return f"the disk that holds {folder} is full: free some space" if full else None


def locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" (another writer): only its own errors, since an OSError's text holds the
    path, and a folder named /srv/unlocked is no lock."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def not_logged_because(exc: BaseException, path: Path) -> str:
    """Why a reply was not logged, and the hint: the end of `run`'s, the chat's and `serve`'s warning.
    Moving the file aside helps a damaged log only: not a locked one, nor one in a read-only folder
    (where no new log can be started either)."""
    if type(exc) in HINTS:
        hint = HINTS[type(exc)]
    elif isinstance(exc, NotAFolder):
        hint = exc.hint
    elif (link := broken_link(path)) is not None:  # "No such file or directory" said to move aside a file not there
        hint = f"{link}: {LINK_HINT}"
    elif locked(exc):
        hint = LOCKED_HINT
    elif not writable(path.parent):
        folder = nearest_existing(path.parent)
        hint = f"{folder} is read-only: make it writable, or point {moved_by(folder) or 'SPECCHAT_DATA_DIR'} elsewhere"
    else:
        hint = full_hint(path) or HINT
    return f"{reason(exc)}  hint: {hint}, or run with --no-log"


def broken_link(path: Path) -> str | None:
    """What is wrong with a log that is a link leading nowhere (a log on another disk, not mounted): it read as no log
    at all ("no replies logged yet", `run -c`: "no conversation is logged yet"). None: no such link, or one into a
    folder that is there, where the first logged reply starts the log."""
    dead = dead_link(path)
    if dead is None or (LEADS_BACK not in dead and Path(os.path.realpath(path)).parent.is_dir()):
        return None
    return f"it is {dead}"
