"""The conversation log: every prompt and reply in one SQLite file (paths.log_file()), as simonw/llm keeps
logs.db. `run -c`/`--cid` and the chat's /load continue a logged conversation; `specchat logs` reads it.

Several specchat processes may write at once: WAL mode, a busy timeout and one short transaction per
reply. Writing happens after the reply is shown, and a failure (a locked or corrupt file, a full disk) is
one warning line on stderr: the log never costs a reply. The file itself (opening, setting up, refusing
what is not specchat's log) is logdb.py's, its failures and their hints logfaults.py's.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .chat import Conversation, Message, whole_number
from .interrupt import Interrupt
from .logaside import file_identity, set_aside
from .logdb import connect, reading, transaction
from .logfaults import LogError, NotSetAside, damaged, not_logged_because, reason
from .paths import env_flag, expand_home, log_file
from .transcript import TranscriptError, load_conversation

if TYPE_CHECKING:
    from .outputs import Request
    from .runtime import Generation, Pipeline

SQLITE_MAX = 2**63 - 1  # SQLite's INTEGER is 64-bit: a larger Python int cannot even be bound


def enabled(no_log: bool) -> bool:
    return not no_log and not env_flag("SPECCHAT_NO_LOG")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    sql = "SELECT CAST(system AS TEXT) AS system FROM conversations WHERE id = ?"
    head = conn and _storable(cid) and conn.execute(sql, (cid,)).fetchone()
    if not head:
        raise LogError(f"no conversation {cid} in the log", hint="`specchat logs` lists the conversations")
    return head


def load(path: Path, cid: int) -> Conversation:
    """A logged conversation's system prompt and messages."""
    with reading(path) as conn:
        head = _conversation_head(conn, cid)
        rows = conn.execute(
            "SELECT role, CAST(content AS TEXT) AS content, interrupted FROM messages WHERE conversation_id = ?"
            " ORDER BY id",
            (cid,),
        ).fetchall()
    messages = [Message(row["role"], row["content"], bool(row["interrupted"])) for row in rows]
    return Conversation(head["system"], messages)


PROMPT = """(SELECT CAST(u.content AS TEXT) FROM messages u WHERE u.conversation_id = m.conversation_id
        AND u.role = 'user' AND u.id < m.id ORDER BY u.id DESC LIMIT 1)"""
# Added only with --cid: `:cid IS NULL OR m.conversation_id = :cid` kept SQLite from the index, so `logs --cid N`
# read the whole log, newest message first, down to conversation N
ONE_CONVERSATION = " AND m.conversation_id = :cid"
# holds(text, query): SQLite's LIKE folds the case of ASCII letters only (`-q école` missed "École")
# (as bytes: SQLite hands a function text as it is, and a message that is not UTF-8 failed the whole search)
SEARCH = f" AND (holds(CAST(m.content AS BLOB), :query) OR holds(CAST({PROMPT} AS BLOB), :query))"
# The reply's number counts its conversation's replies, whatever -q, --cid and -n leave out: a ROW_NUMBER() over
# the conversations of the replies picked. A COUNT(*) of the earlier ones per reply was quadratic in a
# conversation's length (0.4 s for one of 2,000 turns). Window functions came with SQLite 3.25 (Python 3.11 may be
# built on an older one): there, the count stays.
TURNS = """SELECT a.id, ROW_NUMBER() OVER (PARTITION BY a.conversation_id ORDER BY a.id) AS turn FROM messages a
        WHERE a.role = 'assistant' AND a.conversation_id IN (SELECT conversation_id FROM messages WHERE id IN picked)"""
TURNS_COUNTED = """SELECT m.id, (SELECT COUNT(*) FROM messages a WHERE a.conversation_id = m.conversation_id
        AND a.role = 'assistant' AND a.id <= m.id) AS turn FROM messages m WHERE m.id IN picked"""
# CROSS JOIN keeps m the outer loop, in id order (the oldest picked reply first): joined freely, SQLite sorted
# the whole result, text and all, before its first row
REPLIES = """
WITH picked AS (SELECT m.id FROM messages m WHERE m.role = 'assistant' {where} ORDER BY m.id DESC LIMIT :limit),
turns AS ({turns})
SELECT m.id, m.conversation_id, t.turn, m.created, {prompt} AS prompt,
       CAST(c.system AS TEXT) AS system, CAST(m.content AS TEXT) AS reply, m.interrupted,
       CAST(c.pair AS TEXT) AS pair, CAST(c.target AS TEXT) AS target, CAST(c.draft AS TEXT) AS draft,
       CAST(m.label AS TEXT) AS label, m.settings, m.stats
FROM messages m CROSS JOIN conversations c ON c.id = m.conversation_id CROSS JOIN turns t ON t.id = m.id
WHERE m.id IN picked ORDER BY m.id
"""  # columns in the order docs/usage.md lists the keys of `logs --json`; text CAST AS TEXT: a BLOB another program
# stored was bytes in the rows (`logs --json`: "bytes is not JSON serializable"), as text it reads as any other


def replies(path: Path, *, limit: int, query: str | None = None, cid: int | None = None) -> list[dict]:
    """each_reply() as a list."""
    return list(each_reply(path, limit=limit, query=query, cid=cid))


def each_reply(path: Path, *, limit: int, query: str | None = None, cid: int | None = None) -> Iterator[dict]:
    """The most recent replies (oldest first), each with its prompt; limit 0: all of them; query: a substring
    of either. A cid that names no conversation is a LogError, raised by this call (one without replies gives
    none). The rows are read as they are taken: `logs -n 0 --json` held a log of 50M characters in memory."""
    rows = _replies(path, limit=limit, query=query, cid=cid)
    first = next(rows, None)  # the log opened and the cid checked before anything is written
    return _after(first, rows)


def _after(first: dict | None, rows: Iterator[dict]) -> Iterator[dict]:
    """first, then rows (a generator: closing it closes the log)."""
    if first is not None:
        yield first
        yield from rows


def _replies(path: Path, *, limit: int, query: str | None, cid: int | None) -> Iterator[dict]:
    where = (ONE_CONVERSATION if cid is not None else "") + (SEARCH if query else "")
    turns = TURNS if sqlite3.sqlite_version_info >= (3, 25) else TURNS_COUNTED
    sql = REPLIES.format(where=where, turns=turns, prompt=PROMPT)
    limit = min(limit, SQLITE_MAX) or -1  # SQLite's LIMIT -1: none
    with reading(path) as conn:
        if cid is not None:
            _conversation_head(conn, cid)
        if conn is None:
            return
        conn.create_function("holds", 2, _Holds(_encoding(conn)), deterministic=True)
        interrupt = Interrupt()
        values = {"cid": cid, "query": (query or "").casefold(), "limit": limit}
        cursor = _read(conn, interrupt, lambda: conn.execute(sql, values))
        while rows := _read(conn, interrupt, lambda: cursor.fetchmany(ROWS_A_FETCH)):
            yield from (_reply(row) for row in rows)


T = TypeVar("T")
ROWS_A_FETCH = 64  # the rows read at a time: a long log is never held whole (each row holds a reply's text)


def _read(conn: sqlite3.Connection, interrupt: Interrupt, read: Callable[[], T]) -> T:
    """read() of SQLite, with Ctrl-C stopping it (conn.interrupt) and raised as the KeyboardInterrupt it is once it
    has returned. Python's own handler raised it inside `-q`'s function (most of a long search's time), and SQLite
    reported that as "user-defined function raised exception": `logs -q` said the log could not be read, with the
    hint to move it aside."""
    try:
        with interrupt.native(stop=conn.interrupt):
            result = read()
    except sqlite3.OperationalError:
        if interrupt.requested:  # SQLite's "interrupted": the Ctrl-C it was, not a log to move aside
            raise KeyboardInterrupt from None
        raise
    interrupt.check()  # pressed between SQLite's steps
    return result


def _reply(row: sqlite3.Row) -> dict:
    item = dict(row)
    item["interrupted"] = bool(item["interrupted"])
    for key in ("settings", "stats"):
        item[key] = _json_object(item[key])
    if item["settings"] is not None and "system" in item["settings"]:
        system = item["settings"].pop("system")
        if system is None or isinstance(system, str):  # a garbled one: the conversation's stands
            item["system"] = system
    return item


def _encoding(conn: sqlite3.Connection) -> str:
    """The codec of the log's text as stored (CAST AS BLOB gives those bytes): UTF-8 unless another program
    made the file as UTF-16, where -q found nothing."""
    stored = conn.execute("PRAGMA encoding").fetchone()[0]
    return {"UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}.get(stored, "utf-8")


class _Holds:
    """`-q`'s test, which SQLite calls for every prompt and reply (in the log's codec)."""

    def __init__(self, codec: str) -> None:
        self.codec = codec

    def __call__(self, text: bytes | None, folded_query: str) -> bool:
        return self.contains(text, folded_query)

    def contains(self, text: bytes | None, folded_query: str) -> bool:
        """Whether a prompt or reply contains the query, whatever the case of either (str.casefold: ß is ss);
        bad bytes read as the log's connections read them (logdb.lenient_text)."""
        return text is not None and folded_query in text.decode(self.codec, errors="replace").casefold()


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
    notice: str | None = None  # the last write found the log damaged and set it aside: the line that says so
    log_identity: tuple[int, int] | None = None  # file_identity() of the log that holds conversation cid

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
        self.log_identity = file_identity(self.path)
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
            if isinstance(exc, FileNotFoundError) and what[:1] in ("-", "+") and whole_number(what[1:]) is not None:
                raise self._no_such_id(what) from None
            raise TranscriptError(f"cannot read {what}: {reason(exc)}", hint=_load_hint(exc)) from None
        self.restart()
        return loaded, what

    def _no_such_id(self, what: str) -> LogError:
        """/load -1, as a list's last item: it read as a file name ("cannot read -1: No such file"). The ids
        are the log's own numbers; the hint names the latest, which is what -1 meant."""
        try:
            newest = latest(self.path)
        except LogError as exc:  # none logged yet, or a log it cannot read: said as it is
            hint = exc.message
        else:
            hint = f"the latest is {newest}: /load {newest}"
        return LogError(f"no conversation {what}: the ids are the numbers `specchat logs` lists", hint=hint)

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
        if self.notice:
            self._say(self.notice)

    def write(self, conversation: Conversation, reply: dict) -> int:
        """The transaction behind record(): the conversation's id. Raises sqlite3.Error or OSError. A log that
        SQLite finds damaged is set aside and the whole conversation written to a new one (`notice` says so):
        a damaged page anywhere stopped every reply from being logged until the user moved the file."""
        self.notice, seen = None, file_identity(self.path)
        if self.cid is not None and self.log_identity is not None and seen != self.log_identity:
            # Set aside by another writer (serve, another run, this chat's history): the log now there does not
            # hold this conversation, and its id may be another's there (whose messages ours would join).
            self.cid, self.logged = None, 0
        try:
            cid = self._write(conversation, reply)
        except sqlite3.DatabaseError as exc:
            if not damaged(exc):
                raise
            try:
                aside = set_aside(self.path, seen)  # None: another specchat did, after this one found it damaged
            except OSError as why:
                raise NotSetAside(exc, why) from None
            if aside is not None:
                self.notice = damaged_notice(self.path, exc, aside)
            self.cid, self.logged = None, 0  # the new log has none of this conversation yet
            cid = self._write(conversation, reply)
        self.log_identity = file_identity(self.path)
        return cid

    def _write(self, conversation: Conversation, reply: dict) -> int:
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
            # The reply's own system prompt, with its settings: the conversation's row keeps only the latest (`-c
            # --system`, the chat's /system), which `logs` showed for every earlier reply too
            answered = json.dumps({**reply["settings"], "system": conversation.system})
            for index, message in enumerate(new):
                meta = (reply["label"], answered, json.dumps(reply["stats"])) if index == len(new) - 1 else (None,) * 3
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
        self._say(f"warning: this reply was not logged: {self.path}: {not_logged_because(exc, self.path)}")

    @staticmethod
    def _say(line: str) -> None:
        from .view import say, stderr_console

        say(stderr_console(), line, style="yellow", markup=False, highlight=False)


def damaged_notice(path: Path, exc: BaseException, aside: Path) -> str:
    """The one line for a damaged log set aside (by a write, or by the history reading it): the whole path
    where it is not beside `path` (a link to a log elsewhere)."""
    moved = aside.name if aside.parent == path.parent else aside
    return f"warning: the conversation log {path} is damaged ({reason(exc)}): moved to {moved}, a new log started"


def _load_hint(exc: OSError) -> str:
    """What to do of a /load that read nothing: "cannot read 12x: No such file" alone did not say that an ID
    was looked for too, nor what a FILE is; for a file that is there, that is no help."""
    if isinstance(exc, FileNotFoundError):
        return "/load ID: a conversation from `specchat logs`; /load FILE: one saved with /save FILE.json"
    return "check the file's permissions"  # a folder is refused before, as no regular file
