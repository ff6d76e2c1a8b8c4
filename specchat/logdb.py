"""The conversation log's SQLite file itself: opening it (created, set up and checked on first use), its
transactions, and what goes wrong with it (another program's database, a newer specchat's log, a -wal left
without its log, a lock, a read-only folder) with the hint that fits each. Separate from logstore.py, which
reads and writes conversations through these connections: the file's safety rules are one concern, what is
logged another.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

from filelock import FileLock

from .errors import SpecchatError
from .paths import (
    LEADS_BACK,
    NotAFolder,
    blocking_file,
    dead_link,
    file_problem,
    make_dirs,
    moved_by,
    nearest_existing,
    writable,
)

VERSION = 1  # PRAGMA user_version once the tables below exist
BUSY_S = 5.0  # how long a writer waits for another process's transaction
STAMP = "%Y%m%d-%H%M%S"  # of a damaged log set aside: logs-damaged-STAMP.db, then -2, -3 in the same second
STAMP_LENGTH = len(time.strftime(STAMP, time.gmtime(0)))
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversations (
        id INTEGER PRIMARY KEY,
        created TEXT NOT NULL,
        pair TEXT, target TEXT, draft TEXT,
        mode TEXT,
        settings TEXT,  -- JSON of the first reply's settings (k, sampling, max_tokens, ctx)
        system TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id),
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created TEXT NOT NULL,
        interrupted INTEGER NOT NULL DEFAULT 0,
        label TEXT,     -- replies only: how the reply was made, as the view shows it (auto (k<=64))
        settings TEXT,  -- replies only: JSON
        stats TEXT      -- replies only: JSON of Stats.as_dict() (tokens, tok/s, acceptance, rounds by source)
    )""",
    "CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, id)",
)
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
OWN_TABLES = {"conversations", "messages"}


class LogError(SpecchatError):
    """The conversation log cannot be read, or has no such conversation."""


class ForeignDatabase(sqlite3.DatabaseError):
    """Another program's database lies where the log should be: it is neither read nor changed."""


class LeftoverWal(sqlite3.DatabaseError):
    """A -wal file with no log to go with it: the log was moved aside (or emptied) after a process that wrote it
    died, and the file holds that log's latest messages. SQLite deletes such a file when it starts a new log."""


class NewerLog(sqlite3.DatabaseError):
    """A log that a newer specchat set up: its tables may have another shape, so it is neither read nor changed."""


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection with the tables in place (created on first use). Raises sqlite3.Error or OSError."""
    make_dirs(path.parent)
    if path.exists() and (problem := file_problem(path)):  # SQLite: "unable to open", or "disk I/O error"
        raise OSError(errno.EISDIR if path.is_dir() else errno.EINVAL, f"it {problem}, not a log", str(path))
    conn = _open(path)
    try:
        yield conn
    finally:
        conn.close()


def _open(path: Path) -> sqlite3.Connection:
    real = resolved(path)  # SQLite keeps the -wal beside the file a link leads to
    with ExitStack() as stack:
        # A log was set aside here before (its lock file is kept): another set_aside() between the check below
        # and SQLite's open would move the log, this open start an empty one, and SQLite delete the moved log's
        # -wal before set_aside() took it along. It waits for this open (it holds the lock for renames only).
        held = _aside_lock(real).exists() and _hold_off_set_aside(real, stack)
        _refuse_leftover(real, wait=not held)
        if not path.exists():  # every prompt is in it: readable by its owner only (SQLite's -wal/-shm follow)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)  # None: we issue BEGIN ourselves
        try:
            _for_reading(conn)
            _setup(conn)
        except BaseException:
            conn.close()
            raise
    return conn


def _for_reading(conn: sqlite3.Connection) -> None:
    conn.row_factory = sqlite3.Row
    conn.text_factory = lenient_text


def lenient_text(data: bytes) -> str:
    """A connection's text_factory: text that is not UTF-8 (another program's, a disk error) read with U+FFFD
    for its bad bytes. It made every read of the log fail ("Could not decode to UTF-8 column 'reply'")."""
    return data.decode("utf-8", errors="replace")


def _hold_off_set_aside(real: Path, stack: ExitStack) -> bool:
    """Whether set_aside()'s lock is now held (until the stack closes); not where it cannot be taken (a
    read-only folder, a file system without locks, a set_aside() that takes too long)."""
    if not os.access(real.parent, os.W_OK):
        return False
    try:
        stack.enter_context(_aside_locked(real))
    except OSError:
        return False
    return True


def refuse_leftover_wal(path: Path) -> None:
    """A log that is missing or empty beside a -wal that is not: SQLite would take the -wal for a new empty
    log's and delete it. A log in WAL mode always has its first page in the file itself, so this is never
    a log another process is starting; one being set aside (its -wal not moved yet) is waited for."""
    _refuse_leftover(resolved(path), wait=True)


def _refuse_leftover(real: Path, *, wait: bool) -> None:
    """refuse_leftover_wal(); wait=False: set_aside()'s lock is held already, so none is in progress."""
    if _leftover(real):
        if wait:
            _wait_for_set_aside(real)
        if _leftover(real):
            state = "emptied" if real.exists() else "moved away"
            wal = real.with_name(real.name + "-wal")
            raise LeftoverWal(f"{wal} is left from a log that was {state}, and holds its latest messages")


def _leftover(real: Path) -> bool:
    return (not real.exists() or real.stat().st_size == 0) and _has_wal(real)


def _wait_for_set_aside(real: Path) -> None:
    """Until a set_aside() in progress is done: it moves the log, then its -wal (no lock file: none ever was;
    a read-only folder: none can be, and the lock file could not be opened for writing)."""
    if _aside_lock(real).exists():
        with ExitStack() as stack:
            _hold_off_set_aside(real, stack)  # taken, then let go at once


def _setup(conn: sqlite3.Connection) -> None:
    # Switching a new file to WAL needs an exclusive lock, and SQLite may answer "database is locked" at
    # once instead of waiting on the busy timeout (processes opening a new log together): retry briefly.
    deadline = time.monotonic() + BUSY_S
    while True:
        try:
            _refuse_foreign(conn)  # before anything is written, the journal mode included
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] < VERSION:
                with transaction(conn):
                    for statement in SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {VERSION}")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _refuse_foreign(conn: sqlite3.Connection) -> None:
    """A database with tables that specchat did not set up (say simonw/llm's logs.db, found through
    SPECCHAT_DATA_DIR) got specchat's tables added to it, or failed on its own `conversations` table.
    specchat sets the version with its tables; tables a user adds to specchat's log later are theirs."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > VERSION and tables & OWN_TABLES:  # a later version may have renamed or dropped one of them
        raise NewerLog(f"it was written by a newer specchat (log version {version}; this one knows {VERSION})")
    if tables and not (version >= VERSION and tables >= OWN_TABLES):
        shown = ", ".join(sorted(tables - OWN_TABLES or tables)[:3])
        raise ForeignDatabase(f"it is another program's database (tables {shown}), not specchat's log")
    if version > VERSION:
        raise NewerLog(f"it was written by a newer specchat (log version {version}; this one knows {VERSION})")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so two writers queue on the busy timeout instead of
    # failing when a read lock cannot be upgraded.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection | None]:
    """A connection for reading (None: no log yet); failures become LogError."""
    try:
        there = path.exists()
    except OSError as exc:  # in a folder that cannot be searched (mode 000): Path.exists raises
        hint = f"make {path.parent} readable again, or point {moved_by(path.parent) or 'SPECCHAT_DATA_DIR'} elsewhere"
        raise LogError(f"cannot read the conversation log {path}: {reason(exc)}", hint=hint) from None
    if not there:
        _check_folder(path)
        if (link := broken_link(path)) is not None:
            raise LogError(f"cannot read the conversation log {path}: {link}", hint=LINK_HINT)
        try:
            refuse_leftover_wal(path)  # a log moved aside without its -wal: "nothing logged" would hide it
        except LeftoverWal as exc:
            raise LogError(f"cannot read the conversation log {path}: {exc}", hint=LEFT_HINT) from None
        yield None
        return
    try:
        with _connect_to_read(path) as conn:
            yield conn
    except (sqlite3.Error, OSError) as exc:
        hint = _HINTS.get(type(exc)) or (LOCKED_HINT if _locked(exc) else _full_hint(path) or READ_HINT)
        if damaged(exc):
            hint = DAMAGED_READ_HINT
        if _cannot_write_beside(exc, path) and _has_wal(resolved(path)):  # see _connect_to_read: sound, unreadable
            hint = READ_ONLY_WAL_HINT
        raise LogError(f"cannot read the conversation log {path}: {reason(exc)}", hint=hint) from None


@contextmanager
def _connect_to_read(path: Path) -> Iterator[sqlite3.Connection]:
    """connect(), or where SQLite cannot write next to the log (a read-only folder or mount: a WAL log
    needs its -shm file created there), the log opened immutable: reading it needs no write, and
    `logs`, `-c` and /load failed with "attempt to write a readonly database" and a hint to move it aside."""
    with ExitStack() as stack:
        try:
            conn = stack.enter_context(connect(path))
        except sqlite3.OperationalError as exc:  # only opening: the reader's own errors are not retried
            # Immutable would not read a -wal's messages (beside the file a link leads to, as SQLite keeps it).
            if not _cannot_write_beside(exc, path) or _has_wal(resolved(path)):
                raise
            conn = stack.enter_context(closing(sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)))
            _for_reading(conn)
            _refuse_foreign(conn)
        yield conn


def _cannot_write_beside(exc: BaseException, path: Path) -> bool:
    """SQLite could not open the log for want of writing beside it: in another user's folder it says "attempt to
    write a readonly database", on a read-only mount "unable to open database file" (SQLITE_CANTOPEN, as it
    cannot create the -shm there), which is also what it says of a file it cannot open at all: told apart by
    whether the folder can be written."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if "readonly" in str(exc):
        return True
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_CANTOPEN and not writable(resolved(path).parent)


def _has_wal(path: Path) -> bool:
    """Messages not yet checkpointed into the log (a writer that is running, or ended uncleanly): an immutable
    open ignores them, so such a log is not read that way (it would show an older log without saying so)."""
    wal = path.with_name(path.name + "-wal")
    return wal.is_file() and wal.stat().st_size > 0


def broken_link(path: Path) -> str | None:
    """What is wrong with a log that is a link leading nowhere (a log on another disk, not mounted): it read as no log
    at all ("no replies logged yet", `run -c`: "no conversation is logged yet"). None: no such link, or one into a
    folder that is there, where the first logged reply starts the log."""
    dead = dead_link(path)
    if dead is None or (LEADS_BACK not in dead and Path(os.path.realpath(path)).parent.is_dir()):
        return None
    return f"it is {dead}"


def _check_folder(path: Path) -> None:
    """A log that is missing because a file stands where its folder should be (SPECCHAT_DATA_DIR naming a
    file) is an error naming that file, not an empty log."""
    blocker = blocking_file(path.parent)
    if blocker is not None:
        exc = NotAFolder(blocker, path.parent)
        raise LogError(f"cannot read the conversation log {path}: {exc}", hint=exc.hint)


_HINTS = {
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


class NotSetAside(sqlite3.DatabaseError):
    """A damaged log that could not be moved aside (a read-only folder): the warning said only why the move
    failed ("Permission denied"), not that the log is damaged."""

    def __init__(self, exc: BaseException, why: BaseException) -> None:
        super().__init__(f"it is damaged ({reason(exc)}) and could not be moved aside: {reason(why)}")


def reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _full_hint(path: Path) -> str | None:
    """Where the disk that holds the log is full, what to do: moving the log aside (the hint otherwise) starts a
    new log that this disk cannot hold either. None: there is room, or no telling."""
    folder = nearest_existing(resolved(path).parent)
    try:
        full = shutil.disk_usage(folder).free < FULL_BYTES
    except OSError:
        return None
    return f"the disk that holds {folder} is full: free some space" if full else None


def _locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" (another writer): only its own errors, since an OSError's text holds the
    path, and a folder named /srv/unlocked is no lock."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def not_logged_because(exc: BaseException, path: Path) -> str:
    """Why a reply was not logged, and the hint: the end of `run`'s, the chat's and `serve`'s warning.
    Moving the file aside helps a damaged log only: not a locked one, nor one in a read-only folder
    (where no new log can be started either)."""
    if type(exc) in _HINTS:
        hint = _HINTS[type(exc)]
    elif isinstance(exc, NotAFolder):
        hint = exc.hint
    elif (link := broken_link(path)) is not None:  # "No such file or directory" said to move aside a file not there
        hint = f"{link}: {LINK_HINT}"
    elif _locked(exc):
        hint = LOCKED_HINT
    elif not writable(path.parent):
        folder = nearest_existing(path.parent)
        hint = f"{folder} is read-only: make it writable, or point {moved_by(folder) or 'SPECCHAT_DATA_DIR'} elsewhere"
    else:
        hint = _full_hint(path) or HINT
    return f"{reason(exc)}  hint: {hint}, or run with --no-log"
