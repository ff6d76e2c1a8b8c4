"""The conversation log's SQLite file itself: opening it (created, set up and checked on first use), its
transactions, and reading it, with the hint that fits what went wrong (logfaults.py names the failures and
their hints; logaside.py moves a damaged log aside). Separate from logstore.py and logread.py, which write
and read conversations through these connections: the file's safety rules are one concern, what is logged another.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

from .filechecks import file_problem
from .logaside import BUSY_S, hold_off_set_aside, resolved, wait_for_set_aside
from .logfaults import (
    DAMAGED_READ_HINT,
    HINTS,
    LEFT_HINT,
    LINK_HINT,
    LOCKED_HINT,
    READ_HINT,
    READ_ONLY_WAL_HINT,
    ForeignDatabase,
    LeftoverWal,
    LogError,
    NewerLog,
    broken_link,
    damaged,
    full_hint,
    locked,
    reason,
)
from .paths import NotAFolder, blocking_file, make_dirs, moved_by, writable

VERSION = 1  # PRAGMA user_version once the tables below exist
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
OWN_TABLES = {"conversations", "messages"}


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
        held = hold_off_set_aside(real, stack)
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


def refuse_leftover_wal(path: Path) -> None:
    """A log that is missing or empty beside a -wal that is not: SQLite would take the -wal for a new empty
    log's and delete it. A log in WAL mode always has its first page in the file itself, so this is never
    a log another process is starting; one being set aside (its -wal not moved yet) is waited for."""
    _refuse_leftover(resolved(path), wait=True)


def _refuse_leftover(real: Path, *, wait: bool) -> None:
    """refuse_leftover_wal(); wait=False: set_aside()'s lock is held already, so none is in progress."""
    if _leftover(real):
        if wait:
            wait_for_set_aside(real)
        if _leftover(real):
            state = "emptied" if real.exists() else "moved away"
            wal = real.with_name(real.name + "-wal")
            raise LeftoverWal(f"{wal} is left from a log that was {state}, and holds its latest messages")


def _leftover(real: Path) -> bool:
    return (not real.exists() or real.stat().st_size == 0) and _has_wal(real)


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
        hint = HINTS.get(type(exc)) or (LOCKED_HINT if locked(exc) else full_hint(path) or READ_HINT)
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


def _check_folder(path: Path) -> None:
    """A log that is missing because a file stands where its folder should be (SPECCHAT_DATA_DIR naming a
    file) is an error naming that file, not an empty log."""
    blocker = blocking_file(path.parent)
    if blocker is not None:
        exc = NotAFolder(blocker, path.parent)
        raise LogError(f"cannot read the conversation log {path}: {exc}", hint=exc.hint)
