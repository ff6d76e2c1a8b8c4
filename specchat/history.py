"""The drafter's view of the user's past conversations: the history index kept in step with the log.

The conversation log (logstore.py) is the source of truth; the index is derived from it and can always
be rebuilt. Before each reply, messages logged since the last update are tokenized with the target's
tokenizer and appended, so every reply drafts from all earlier ones. Nothing here may stop a reply: a
damaged index is rebuilt with one notice line, an unusable one (permissions, a full disk) is dropped
with one notice line, and a writer that holds the lock makes the others skip their update, not wait.
Nothing leaves the machine: the index lives next to the log (SPECCHAT_DATA_DIR), readable by its owner.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable
from pathlib import Path

from filelock import Timeout

from .historyindex import DEFAULT_CAPACITY, LOCK_NAME, HistoryIndex, IndexDamaged, NewerIndex
from .historylog import log_emptied, log_state, new_messages
from .historytokens import fingerprint, message_tokens
from .logaside import file_identity, set_aside
from .logfaults import LEFT_HINT, LeftoverWal, damaged
from .paths import NotAFolder, data_dir, disk_full, env_flag, log_file, moved_by, nearest_existing, writable
from .tokenchains import Chains

NOTICE_CHARS = 1_000_000  # more new log text than this to index: said first (8M characters took ~5 s, in silence)
LOCK_WAIT_S = 0.2  # another process is updating: skip this update rather than delay the reply
Notify = Callable[[str], None]


def enabled(no_history: bool) -> bool:
    """--no-history or SPECCHAT_NO_HISTORY=1 turn the history off."""
    return not no_history and not env_flag("SPECCHAT_NO_HISTORY")


def root() -> Path:
    return data_dir() / "history"


def _way_out(exc: BaseException, folder: Path) -> str:
    """A directory where the index keeps a file, or a file where it keeps a folder, stops every run until it
    is moved; so does a link where it keeps a file (its lock), or an index file this user may not open (another
    user's: a run with sudo). The index is rebuilt from the log without it."""
    if isinstance(exc, NotAFolder):  # made by make_dirs: it names the file and has its hint
        return f"; {exc.hint}"
    if isinstance(exc, IsADirectoryError) and exc.filename:
        in_the_way = exc.filename2 or exc.filename  # os.replace(tmp, meta.json): the second is the directory
        return f"; move {in_the_way} aside (the history is rebuilt from the log)"
    if isinstance(exc, LeftoverWal):  # with --no-log, this notice is the only word of it
        return f"; {LEFT_HINT}"
    if isinstance(exc, NewerIndex):
        return "; upgrade specchat to draft from it (it is kept as it is)"
    if disk_full(exc):  # what was committed is kept
        return f"; the disk that holds {folder} is full: free some space"
    ours = isinstance(exc, OSError) and exc.filename and Path(exc.filename).is_relative_to(folder)
    # the lock holds nothing: removed, it is made again and the index is used as it is; any other file is data
    lock = ours and Path(exc.filename).name == LOCK_NAME
    again = "it is made again" if lock else "the history is rebuilt from the log"
    if ours and exc.errno == errno.ELOOP:  # the lock file opens without following links (filelock's O_NOFOLLOW)
        return f"; remove {exc.filename} (a link where the index keeps a file; {again})"
    if ours and isinstance(exc, PermissionError):
        return f"; make {exc.filename} readable and writable by you, or delete it ({again})"
    return ""


class History:
    """Lookups in the past conversations (`chains`, None while unusable) and their update from the log."""

    def __init__(self, index: HistoryIndex, tokenize: Callable[[str], list[int]], log: Path, notify: Notify) -> None:
        self.index = index
        self.tokenize = tokenize
        self.log = log
        self.notify = notify
        self.usable = True
        self.frozen = False  # its folder is read-only: the committed index is read, never written
        self.damaged: str | None = None  # why a frozen index cannot be used (it cannot be rebuilt either)
        self.logging = False  # this run logs its replies: a log found damaged is set aside for a new one

    @classmethod
    def open(
        cls,
        model,
        notify: Notify,
        *,
        folder: Path | None = None,
        log: Path | None = None,
        capacity: int = 0,
        logging: bool = False,
    ) -> History | None:
        """The history for this target's tokenizer (None: its engine cannot say which tokenizer it is).
        `logging`: this run logs its replies, so a log it cannot write leaves the history as it is."""
        key = fingerprint(model)
        if key is None:
            return None
        index = HistoryIndex((folder or root()) / key, key, capacity or DEFAULT_CAPACITY, int(model.n_vocab))
        history = cls(index, lambda text: model.tokenize(text), log or log_file(), notify)
        history.frozen = not writable(index.folder)
        history.logging = logging
        history.update()
        history._say_if_read_only(logging)
        return history

    def _say_if_read_only(self, logging: bool) -> None:
        """One notice, at the start of a run, where nothing new can reach the history: its folder is
        read-only (it was unused, or left as it was, in silence), or the log that feeds it is."""
        candidates = ([self.index.folder] if self.frozen else []) + ([self.log.parent, self.log] if logging else [])
        blocked = next((nearest_existing(path) for path in candidates if not writable(path)), None)
        if not self.usable or blocked is None:  # unusable: update() has said why
            return
        if not logging and not self._log_ahead():  # --no-log, and the index lacks nothing
            return
        state = "frozen (new replies are not added to it)" if self.chains is not None else "off in this run"
        if self.damaged:  # it cannot be rebuilt where it is: say so, or it reads as if there were no index
            state += f", its index damaged ({self.damaged})"
        # A read-only folder above the data folder is in no specchat folder; SPECCHAT_DATA_DIR still moves it.
        moved = f"; {moved_by(blocked) or 'SPECCHAT_DATA_DIR'} moves it"
        self.notify(f"history: {state}: {blocked} is read-only{moved}; --no-history hides this")

    @property
    def chains(self) -> Chains | None:
        return self.index.chains if self.usable else None

    def _unused(self, where: Path, exc: BaseException, way_out: str | None = None) -> None:
        """Off for this run, with the one notice that says why and the way out."""
        self.usable = False
        way_out = _way_out(exc, self.index.folder) if way_out is None else way_out
        # An OSError without a file name (a write that failed) said "[Errno 28] No space left on device"
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror and not exc.filename else exc
        self.notify(f"history: not used in this run ({where}: {why}){way_out}; --no-history hides this")

    def update(self) -> None:
        """Append what the log gained since the last update (a no-op when nothing did). Never raises."""
        if not self.usable:
            return
        if self.frozen:  # read what is committed (another user's writes, too); nothing can be written
            self._read_frozen()
            return
        seen = file_identity(self.log)
        try:
            self._update()
        except Timeout:
            try:  # another process is writing: use what is committed
                self.index.refresh()
            except (IndexDamaged, OSError):
                pass
            except NewerIndex as exc:  # a newer specchat committed its index while we waited for the lock
                self._unused(self.index.folder, exc)
        except Exception as exc:  # a full disk, a locked log, a tokenizer error: never a reason to stop a reply
            if damaged(exc) and self._set_log_aside(exc, seen):
                return
            where = self.log if isinstance(exc, sqlite3.Error) else self.index.folder  # only the log is SQLite
            way_out = None
            if damaged(exc):  # logging: the move failed (the writer's warning says why); --no-log: a writer moves it
                way_out = "; the log is damaged: " + (
                    "move it aside (a new one starts)" if self.logging else "the next logged reply moves it aside"
                )
            self._unused(where, exc, way_out)

    def _read_frozen(self) -> None:
        try:
            self.index.refresh()
            self.damaged = None  # rebuilt since by whoever may write there
        except IndexDamaged as why:
            if self.index.meta_path.exists():  # none yet is no damage
                self.damaged = str(why)
            return
        except OSError:
            return
        except NewerIndex as exc:
            self._unused(self.index.folder, exc)
            return
        try:
            stale = self._replaced(*self._log_state())
        except (sqlite3.Error, OSError):  # a log that cannot be read: judged where it can be
            return
        if stale:  # a writable index would be emptied (or made again from the new log): this one cannot be
            self.usable = False
            folder = self.index.folder
            self.notify(
                f"history: not used in this run: {folder} holds conversations the log no longer has (it was deleted or"
                f" replaced) and is read-only; make it writable (the next run makes it again from the log) to forget"
                " them; --no-history hides this"
            )

    def _set_log_aside(self, exc: BaseException, seen: tuple[int, int] | None) -> bool:
        """A damaged log in a run that logs: set aside, as its writer would (a page damaged in the middle may
        never be written again, and the index that reads it was off in every run). The next update finds the log
        replaced (_replaced), or holding no message yet (then the index is emptied), and makes the index again
        from the new log alone, what it took from the damaged one dropped. False: left as it is (--no-log, or the
        move failed)."""
        from .logstore import damaged_notice

        if not self.logging:
            return False
        try:
            aside = set_aside(self.log, seen)
        except OSError:
            return False
        if aside is not None:
            self.notify(damaged_notice(self.log, exc, aside))
        return True

    def _update(self) -> None:
        try:
            self.index.refresh()
        except IndexDamaged as why:
            # No index yet and nothing logged to put in it (--no-log on a new data folder): make none, or an
            # empty one would stay for good; the first update after a message is logged builds it.
            if self.index.meta_path.exists() or self._log_id() > 0:
                self._rebuild(str(why))
            return
        latest, mark = self._log_state()
        replaced = self._replaced(latest, mark)
        if latest <= self.index.meta.log_id and not replaced:
            return  # the usual case: nothing new, and no lock taken
        with self.index.lock.acquire(timeout=LOCK_WAIT_S):
            self.index.refresh()  # another process may have appended (or started again) since
            if replaced and self._replaced(*self._log_state()):
                self.index.create()
            self._append_new()

    def _replaced(self, latest: int, mark: str | None) -> bool:
        """Whether the log is a new one (the old one was moved aside, as troubleshooting.md advises for a
        corrupt one): its messages would never be taken, and the old log's would stay, so start again. Its
        ids stopping short tell; so does another message under the index's last id, where ids alone (a new
        log that had caught up before this update) kept the old log's text and skipped the new one's."""
        meta = self.index.meta
        if meta.log_id == 0:  # nothing taken yet: nothing to judge
            return False
        if latest == 0:  # no message seen: a deleted or emptied log is forgotten, a locked one judged later
            return log_emptied(self.log)
        return latest < meta.log_id or (bool(meta.log_mark) and mark != meta.log_mark)

    def _rebuild(self, why: str) -> None:
        self.index.make_folder()
        with self.index.lock.acquire(timeout=LOCK_WAIT_S):
            try:
                self.index.refresh()  # another process may have rebuilt it already
                return
            except IndexDamaged:
                pass
            damaged = self.index.meta_path.exists() or self.index.meta_path.is_symlink()  # one leading nowhere, too
            self.index.create()
            if self._log_id() > 0:
                self._append_new()
            if damaged:  # once rebuilt: a rebuild that fails is update()'s one notice, not a second one
                self.notify(f"history: the index in {self.index.folder} was damaged ({why}): rebuilt from the log")

    def _append_new(self) -> None:
        if self._log_id() <= self.index.meta.log_id:  # nothing new; deleted or emptied (the index was emptied)
            return
        last, texts, log_mark = new_messages(self.log, self.index.meta.log_id)
        if last <= self.index.meta.log_id:
            return
        size = sum(map(len, texts))
        if size > NOTICE_CHARS:  # a first use of a long log: seconds before the reply starts
            self.notify(
                f"history: indexing {size:,} characters of past conversations (once; later runs add only new ones)"
            )
        self.index.append(message_tokens(self.tokenize, texts), last, log_mark)

    def _log_ahead(self) -> bool:
        """The log holds messages the index lacks; a log that cannot be read (the run says so where it logs)
        adds nothing to it."""
        try:
            return self._log_id() > self.index.meta.log_id
        except sqlite3.Error:
            return False

    def _log_id(self) -> int:
        """The latest message id in the log (0: no log yet)."""
        return self._log_state()[0]

    def _log_state(self) -> tuple[int, str | None]:
        """The latest message id in the log (0: no log yet) and the mark of its message under the id the
        index took last (None: none there)."""
        return log_state(self.log, self.index.meta.log_id)
