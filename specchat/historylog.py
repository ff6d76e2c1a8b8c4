"""What the history reads of the conversation log (logstore.py writes it): the latest message id, the messages
after the last one indexed, and a mark that tells a new log from the old one. Read only: the history never
writes the log, never creates it, and a log it cannot read adds nothing this time."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from .logdb import lenient_text, refuse_leftover_wal

SYNC_CHARS = 8_000_000  # new log text taken per update: a first use indexes the newest part of the log


def log_state(log: Path, taken: int) -> tuple[int, str | None]:
    """The latest message id in the log (0: no log yet) and the mark of its message under `taken`, the id the
    index took last (None: none there)."""
    if not os.path.isfile(log):  # none, or in a folder that cannot be searched (Path.is_file would raise)
        return 0, None
    try:
        with _read_only(log) as conn:
            latest = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])
            return latest, mark(conn, taken)
    except sqlite3.OperationalError:  # locked, or no tables yet: nothing to add this time
        return 0, None


def new_messages(log: Path, after: int) -> tuple[int, list[str], str]:
    """(latest id, texts oldest first, the latest's mark) of the messages after `after`: the newest
    SYNC_CHARS of text; older ones are skipped for good (a first update of a long log must not take
    minutes)."""
    texts, size, last = [], 0, after
    with _read_only(log) as conn:
        rows = conn.execute(
            "SELECT id, CAST(content AS TEXT) FROM messages WHERE id > ? AND role IN ('user', 'assistant')"
            " ORDER BY id DESC",
            (after,),
        )
        for message_id, content in rows:
            last = max(last, message_id)
            if size + len(content) > SYNC_CHARS:
                break
            texts.append(content)
            size += len(content)
        log_mark = mark(conn, last) or ""
    return last, texts[::-1], log_mark


def log_emptied(log: Path) -> bool:
    """The log was deleted (a link that leads nowhere is a disk not mounted, not a deleted log) or holds no
    message (a 0-byte file, or one without the messages table, holds none either): what the index took from
    it must not outlive it (a user who deletes the log expects its conversations gone). False where the log
    cannot be read: locked, or damaged."""
    try:
        os.lstat(log)
    except FileNotFoundError:
        return True
    except OSError:  # in a folder that cannot be searched: not a deleted log
        return False
    if not os.path.isfile(log):  # a link leading nowhere, a directory; a FIFO, which SQLite would wait on
        return False
    try:
        with _read_only(log) as conn:
            return not _has_messages_table(conn) or conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() is None
    except (sqlite3.Error, OSError):
        return False


def _has_messages_table(conn: sqlite3.Connection) -> bool:
    """Asked of the schema (a locked log raises): a query of a missing table fails as a locked log does."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'").fetchone() is not None


def mark(conn: sqlite3.Connection, message_id: int) -> str | None:
    """A short hash of a logged message (its time and text), None where the log has none with this id:
    which log the index was built from, where ids alone cannot tell a new log from the old one."""
    row = conn.execute("SELECT created, CAST(content AS TEXT) FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        return None
    return hashlib.sha256(f"{row[0]}\0{row[1]}".encode(errors="replace")).hexdigest()[:16]


def _read_only(path: Path) -> closing[sqlite3.Connection]:
    """A read-only connection to the log: the history never writes it, never creates it. Not to an empty log
    beside a -wal: even a read-only connection would delete that (logfaults.LeftoverWal)."""
    refuse_leftover_wal(path)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    conn.text_factory = lenient_text  # one message that is not UTF-8 turned the whole history off
    return closing(conn)
