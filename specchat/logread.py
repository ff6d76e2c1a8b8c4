"""The conversation log read back: a conversation to continue (`run -c`, `--cid`, /load) and the replies that
`specchat logs` lists, read a few rows at a time, searched with `-q` and stopped by Ctrl-C. Writing is logstore.py's.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .chat import Conversation, Message
from .interrupt import Interrupt
from .logdb import reading
from .logfaults import LogError

SQLITE_MAX = 2**63 - 1  # SQLite's INTEGER is 64-bit: a larger Python int cannot even be bound


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
       NULL AS answered_by, CAST(m.label AS TEXT) AS label, m.settings, m.stats
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
    settings = item["settings"] or {}
    if "system" in settings:
        system = settings.pop("system")
        if system is None or isinstance(system, str):  # a garbled one: the conversation's stands
            item["system"] = system
    item["answered_by"] = _answered_by({key: settings.pop(key) for key in MODEL_FILES if key in settings}, item)
    return item


MODEL_FILES = ("pair", "target", "draft")  # kept with each reply's settings, and the conversation's as it began


def _answered_by(files: dict, item: dict) -> dict:
    """The pair and files that answered a reply: the conversation's where its settings do not hold them (a reply
    logged before specchat kept them per reply, one it did not write) or hold them garbled."""
    whole = len(files) == len(MODEL_FILES) and isinstance(files["target"], str)
    if whole and all(files[key] is None or isinstance(files[key], str) for key in ("pair", "draft")):
        return files
    return {key: item[key] for key in MODEL_FILES}


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
