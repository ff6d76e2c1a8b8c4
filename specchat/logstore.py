"""The conversation log: every prompt and reply in one SQLite file (paths.log_file()), as simonw/llm keeps
logs.db. `run -c`/`--cid` and the chat's /load continue a logged conversation (read back by logread.py, as
`specchat logs` reads it).

Several specchat processes may write at once: WAL mode, a busy timeout and one short transaction per
reply. Writing happens after the reply is shown, and a failure (a locked or corrupt file, a full disk) is
one warning line on stderr: the log never costs a reply. The file itself (opening, setting up, refusing
what is not specchat's log) is logdb.py's, its failures and their hints logfaults.py's.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .chat import Conversation, Message, whole_number
from .logaside import file_identity, set_aside
from .logdb import connect, transaction
from .logfaults import LogError, NotSetAside, damaged, not_logged_because, reason
from .logread import MODEL_FILES, latest, load
from .paths import env_flag, expand_home, log_file
from .transcript import TranscriptError, load_conversation

if TYPE_CHECKING:
    from .generation import Generation
    from .outputs import Request
    from .runtime import Pipeline


def enabled(no_log: bool) -> bool:
    return not no_log and not env_flag("SPECCHAT_NO_LOG")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    gone: list[Message] = field(default_factory=list)  # messages that gave way before they were logged

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

    def gave_way(self, messages: list[Message]) -> None:
        """The conversation's oldest messages left it (chat.fit_conversation): the ones logged already are no
        longer in it, so fewer of its messages are logged; the others (a loaded file's) are logged before the
        next reply, or a file's turns that gave way with its first reply never reached the log."""
        self.gone += messages[self.logged :]
        self.logged = max(0, self.logged - len(messages))

    def restart(self) -> None:
        """The next reply starts a new conversation in the log (/reset, /load FILE)."""
        self.cid, self.logged, self.history, self.gone = None, 0, None, []

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
            self.logged, self.gone = len(conversation.messages), []
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
            new = self.gone + conversation.messages[self.logged :]
            # The reply's own system prompt and model files, with its settings: the conversation's row keeps only the
            # latest system prompt (`-c --system`, the chat's /system) and the files it began with, which `logs` showed
            # for every reply, one that `-c --target OTHER`, --pair, --mode or the chat's /mode made with others too
            files = {key: reply[key] for key in MODEL_FILES}
            answered = json.dumps({**reply["settings"], "system": conversation.system, **files})
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
