"""The conversation log: every prompt and reply in one SQLite file (paths.log_file()), as simonw/llm keeps
logs.db. `run -c`/`--cid` and the chat's /load continue a logged conversation; `specchat logs` reads it.

Several specchat processes may write at once: WAL mode, a busy timeout and one short transaction per
reply. Writing happens after the reply is shown, and a failure (a locked or corrupt file, a full disk) is
one warning line on stderr: the log never costs a reply.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .chat import Conversation, Message, whole_number
from .errors import SpecchatError
from .paths import (
    NotAFolder,
    blocking_file,
    env_flag,
    expand_home,
    file_problem,
    log_file,
    make_dirs,
    moved_by,
    nearest_existing,
    writable,
)
from .transcript import TranscriptError, load_conversation

if TYPE_CHECKING:
    from .outputs import Request
    from .runtime import Generation, Pipeline

VERSION = 1  # PRAGMA user_version once the tables below exist
BUSY_S = 5.0  # how long a writer waits for another process's transaction
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
READ_ONLY_WAL_HINT = (
    "the log or its folder is read-only, and its -wal holds messages SQLite must write there to read: make them"
    " writable, or copy the log and its -wal to a writable folder and point SPECCHAT_DATA_DIR there"
)
LOCKED_HINT = "another specchat is writing to it; try again when that one is done"
FOREIGN_HINT = "set SPECCHAT_DATA_DIR to a folder of specchat's own"
LEFT_HINT = "move it next to that log, named as it with -wal added (old.db: old.db-wal), or delete it"
NEWER_HINT = "upgrade specchat to read and write it (nothing in it was changed), or set SPECCHAT_DATA_DIR elsewhere"
OWN_TABLES = {"conversations", "messages"}
SQLITE_MAX = 2**63 - 1  # SQLite's INTEGER is 64-bit: a larger Python int cannot even be bound


class LogError(SpecchatError):
    """The conversation log cannot be read, or has no such conversation."""


class ForeignDatabase(sqlite3.DatabaseError):
    """Another program's database lies where the log should be: it is neither read nor changed."""


class LeftoverWal(sqlite3.DatabaseError):
    """A -wal file with no log to go with it: the log was moved aside (or emptied) after a process that wrote it
    died, and the file holds that log's latest messages. SQLite deletes such a file when it starts a new log."""


class NewerLog(sqlite3.DatabaseError):
    """A log that a newer specchat set up: its tables may have another shape, so it is neither read nor changed."""


def enabled(no_log: bool) -> bool:
    return not no_log and not env_flag("SPECCHAT_NO_LOG")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection with the tables in place (created on first use). Raises sqlite3.Error or OSError."""
    make_dirs(path.parent)
    if path.exists() and (problem := file_problem(path)):  # SQLite: "unable to open", or "disk I/O error"
        raise OSError(errno.EISDIR if path.is_dir() else errno.EINVAL, f"it {problem}, not a log", str(path))
    refuse_leftover_wal(path)
    if not path.exists():  # every prompt is in it: readable by its owner only (SQLite's -wal/-shm follow)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)  # None: we issue BEGIN ourselves
    try:
        conn.row_factory = sqlite3.Row
        _setup(conn)
        yield conn
    finally:
        conn.close()


def refuse_leftover_wal(path: Path) -> None:
    """A log that is missing or empty beside a -wal that is not: SQLite would take the -wal for a new empty
    log's and delete it. A log in WAL mode always has its first page in the file itself, so this is never
    a log another process is starting."""
    wal = path.with_name(path.name + "-wal")
    if (not path.exists() or path.stat().st_size == 0) and _has_wal(path):
        state = "emptied" if path.exists() else "moved away"
        raise LeftoverWal(f"{wal} is left from a log that was {state}, and holds its latest messages")


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
    if not path.exists():
        _check_folder(path)
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
        hint = _HINTS.get(type(exc)) or (LOCKED_HINT if _locked(exc) else READ_HINT)
        if "readonly" in str(exc) and _has_wal(path):  # see _connect_to_read: sound, but unreadable where it is
            hint = READ_ONLY_WAL_HINT
        raise LogError(f"cannot read the conversation log {path}: {_reason(exc)}", hint=hint) from None


@contextmanager
def _connect_to_read(path: Path) -> Iterator[sqlite3.Connection]:
    """connect(), or where SQLite cannot write next to the log (a read-only folder or mount: a WAL log
    needs its -shm file created there), the log opened immutable: reading it needs no write, and
    `logs`, `-c` and /load failed with "attempt to write a readonly database" and a hint to move it aside."""
    with ExitStack() as stack:
        try:
            conn = stack.enter_context(connect(path))
        except sqlite3.OperationalError as exc:  # only opening: the reader's own errors are not retried
            if "readonly" not in str(exc) or _has_wal(path):  # immutable would not read a -wal's messages
                raise
            conn = stack.enter_context(closing(sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)))
            conn.row_factory = sqlite3.Row
            _refuse_foreign(conn)
        yield conn


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


_HINTS = {
    ForeignDatabase: FOREIGN_HINT,
    NewerLog: NEWER_HINT,
    LeftoverWal: LEFT_HINT,
}  # neither is damage: moving it aside is no fix


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


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
    elif _locked(exc):
        hint = LOCKED_HINT
    elif not writable(path.parent):
        folder = nearest_existing(path.parent)
        hint = f"{folder} is read-only: make it writable, or point {moved_by(folder) or 'SPECCHAT_DATA_DIR'} elsewhere"
    else:
        hint = HINT
    return f"{_reason(exc)}  hint: {hint}, or run with --no-log"


# -- reading ---------------------------------------------------------------------------------------------


def latest(path: Path) -> int:
    """The conversation with the most recent message."""
    with reading(path) as conn:
        row = conn and conn.execute("SELECT conversation_id FROM messages ORDER BY id DESC LIMIT 1").fetchone()
    if not row:
        raise LogError("no conversation is logged yet", hint='start one with specchat run "your prompt"')
    return int(row[0])


def _storable(cid: int) -> bool:
    """Whether SQLite can hold this id: no conversation has one that it cannot (--cid 99999999999999999999)."""
    return -SQLITE_MAX - 1 <= cid <= SQLITE_MAX


def _conversation_head(conn: sqlite3.Connection | None, cid: int) -> sqlite3.Row:
    """The conversation's row, or LogError when the log has none with this id (or SQLite could not hold it)."""
    head = conn and _storable(cid) and conn.execute("SELECT system FROM conversations WHERE id = ?", (cid,)).fetchone()
    if not head:
        raise LogError(f"no conversation {cid} in the log", hint="`specchat logs` lists the conversations")
    return head


def load(path: Path, cid: int) -> Conversation:
    """A logged conversation's system prompt and messages."""
    with reading(path) as conn:
        head = _conversation_head(conn, cid)
        rows = conn.execute(
            "SELECT role, content, interrupted FROM messages WHERE conversation_id = ? ORDER BY id", (cid,)
        ).fetchall()
    messages = [Message(row["role"], row["content"], bool(row["interrupted"])) for row in rows]
    return Conversation(head["system"], messages)


REPLIES = """
SELECT m.id, m.conversation_id, m.created, m.content AS reply, m.interrupted, m.label, m.settings, m.stats,
       c.pair, c.target, c.draft, c.system,
       (SELECT u.content FROM messages u WHERE u.conversation_id = m.conversation_id AND u.role = 'user'
        AND u.id < m.id ORDER BY u.id DESC LIMIT 1) AS prompt,
       (SELECT COUNT(*) FROM messages a WHERE a.conversation_id = m.conversation_id AND a.role = 'assistant'
        AND a.id <= m.id) AS turn
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.role = 'assistant' AND (:cid IS NULL OR m.conversation_id = :cid)
"""
SEARCH = " AND (m.content LIKE :like ESCAPE '\\' OR prompt LIKE :like ESCAPE '\\')"


def replies(path: Path, *, limit: int, query: str | None = None, cid: int | None = None) -> list[dict]:
    """The most recent replies (oldest first), each with its prompt; query: a substring of either. A cid
    that names no conversation is a LogError (one without replies gives none)."""
    sql = REPLIES + (SEARCH if query else "") + " ORDER BY m.id DESC LIMIT :limit"
    limit = min(limit, SQLITE_MAX)
    like = "%" + (query or "").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with reading(path) as conn:
        if cid is not None:
            _conversation_head(conn, cid)
        rows = conn.execute(sql, {"cid": cid, "like": like, "limit": limit}).fetchall() if conn else []
    out = []
    for row in reversed(rows):
        item = dict(row)
        item["interrupted"] = bool(item["interrupted"])
        for key in ("settings", "stats"):
            item[key] = _json_object(item[key])
        out.append(item)
    return out


def _json_object(text: str | None) -> dict | None:
    """A reply's settings or stats. One garbled (by hand, a disk error, another program) was an internal
    error that hid every other reply: it is shown as absent, as for a reply logged without them."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- writing ---------------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """One run's or one chat's place in the log: which conversation, and how many of its messages are
    logged already (a conversation loaded from a file is logged whole with its first new reply)."""

    enabled: bool = False
    path: Path = field(default_factory=log_file)
    cid: int | None = None
    logged: int = 0
    history: Conversation | None = None  # what -c / --cid continues
    warned: bool = False

    @classmethod
    def start(cls, *, no_log: bool, latest_one: bool = False, cid: int | None = None) -> Recorder:
        """For `run`: continuing (-c: the latest conversation, --cid: that one) reads the log first."""
        recorder = cls(enabled(no_log))
        if latest_one or cid is not None:
            recorder.attach(cid if cid is not None else latest(recorder.path))
        return recorder

    def attach(self, cid: int) -> Conversation:
        """Continue logged conversation cid; its messages are the history."""
        self.history = load(self.path, cid)
        self.cid, self.logged = cid, len(self.history.messages)
        return self.history

    def load(self, what: str) -> tuple[Conversation, str]:
        """/load: a logged conversation by id, or a file saved with /save FILE.json (logged as a new
        conversation, whole, with the next reply). Raises LogError or TranscriptError."""
        cid = whole_number(what, max_digits=4300)  # an id SQLite cannot hold is 'no conversation N'
        if cid is not None:
            return self.attach(cid), f"conversation {cid}"
        try:
            loaded = load_conversation(expand_home(what))
        except OSError as exc:
            raise TranscriptError(f"cannot read {what}: {_reason(exc)}") from None
        self.restart()
        return loaded, what

    def gave_way(self, count: int) -> None:
        """The conversation's `count` oldest messages left it (chat.fit_conversation): the ones logged
        already are no longer in it, so fewer of its messages are logged."""
        self.logged = max(0, self.logged - count)

    def restart(self) -> None:
        """The next reply starts a new conversation in the log (/reset, /load FILE)."""
        self.cid, self.logged, self.history = None, 0, None

    def conversation(self, system: str | None) -> Conversation:
        """The conversation to go on with: the history (a new --system replaces its own), or a new one."""
        if self.history is None:
            return Conversation(system)
        return Conversation(system or self.history.system, list(self.history.messages))

    def record_reply(self, conversation: Conversation, generation: Generation, pipeline: Pipeline, request: Request):
        """Append the reply to the conversation, then log what the log does not have yet."""
        interrupted = generation.stats.stop_reason == "interrupted"
        conversation.messages.append(Message("assistant", generation.text, interrupted=interrupted))
        if self.enabled:
            from .outputs import summary

            self.record(conversation, summary(pipeline, request, generation))

    def record(self, conversation: Conversation, reply: dict) -> None:
        """Log the conversation's new messages; `reply` (outputs.summary) describes the last one. Never
        raises: a failure is one warning line."""
        try:
            self.cid = self.write(conversation, reply)
            self.logged = len(conversation.messages)
        except (sqlite3.Error, OSError) as exc:
            self._warn(exc)

    def write(self, conversation: Conversation, reply: dict) -> int:
        """The transaction behind record(): the conversation's id. Raises sqlite3.Error or OSError."""
        now, settings = _now(), json.dumps(reply["settings"])
        with connect(self.path) as conn, transaction(conn):
            cid = self.cid
            if cid is None:
                cid = conn.execute(
                    "INSERT INTO conversations (created, pair, target, draft, mode, settings, system)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (now, reply["pair"], reply["target"], reply["draft"], reply["mode"], settings, conversation.system),
                ).lastrowid
            else:  # /system may have changed it since
                conn.execute("UPDATE conversations SET system = ? WHERE id = ?", (conversation.system, cid))
            new = conversation.messages[self.logged :]
            for index, message in enumerate(new):
                meta = (reply["label"], settings, json.dumps(reply["stats"])) if index == len(new) - 1 else (None,) * 3
                conn.execute(
                    "INSERT INTO messages (conversation_id, role, content, created, interrupted, label, settings,"
                    " stats) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (cid, message.role, message.content, now, int(message.interrupted), *meta),
                )
        return cid

    def _warn(self, exc: BaseException) -> None:
        # Once per run or chat: a locked or broken log should not repeat itself after every reply.
        if self.warned:
            return
        self.warned = True
        from .view import stderr_console

        line = f"warning: this reply was not logged: {self.path}: {not_logged_because(exc, self.path)}"
        stderr_console().print(line, style="yellow", soft_wrap=True, markup=False, highlight=False)
