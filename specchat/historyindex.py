"""The user's past conversations as one persistent, bounded index of token ids (drafters/suffix.py).

Why memory-mapped files and not SQLite: a lookup walks up to 64 hash-chain links and gathers a few
thousand tokens; on mapped numpy arrays that is a few dozen microseconds, and opening is two mmaps (the hash
heads are read, not mapped: HeadFile) and a small JSON file, whatever the size. SQLite would need one row
per token (20-30 bytes instead of 8) and a query per candidate. Layout, in
`<data dir>/history/<tokenizer fingerprint>/` (a model family with another vocabulary gets another folder,
so ids never mix):

    meta.json          what is committed: window [start, total), the last log message indexed (id, mark), generation
    <gen>.tokens       int32 ring of `capacity` slots (tokenchains.SEP between messages)
    <gen>.prev         uint32 per slot: distance to the previous position with the same hash bucket
    <gen>.head         int64 per bucket: latest position + 1
    lock               writers take it (filelock); readers never wait

Files are created sparse at full size and never shrink: a process that has them mapped can never read
past their end (SIGBUS). Writes go through the files, not the mappings, so a full disk is an OSError,
not a signal. An
append first commits the eviction it will cause (meta `start`), then writes, then commits `total`: a
writer that dies half-way leaves only slots the meta already calls evicted or not yet written. A reader
that races a writer may read a slot as it is rewritten; that costs a bad guess at worst, since the
target checks every drafted token. Anything that does not add up is rebuilt as a new generation: opening
checks a sample of the window (historycheck.py), so files of the right size with damaged contents are found
too.
"""

from __future__ import annotations

import json
import os
import uuid
import weakref
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from . import historycheck
from .paths import is_special, make_dirs, write_atomic
from .tokenchains import Chains, Links, slot_ranges

VERSION = 1
DEFAULT_CAPACITY = 8_000_000  # tokens kept (the oldest go first): at most ~98 MB on disk (12.2 bytes a token)
LOCK_NAME = "lock"  # writers take it; it holds nothing, so removing it loses nothing
FILES = {"tokens": np.int32, "prev": np.uint32, "head": np.int64}
WHOLE_HEAD = 4096  # more touched buckets than this: rewrite the head array in one write


class IndexDamaged(Exception):
    """The files on disk do not add up (missing, truncated, inconsistent): rebuild."""


class NewerIndex(Exception):
    """An index a newer specchat made: its files may be laid out otherwise, so it is neither read nor rebuilt
    (an older specchat beside the newer one would replace its index in every run)."""


def _refuse_newer(data) -> None:
    version = data.get("version") if isinstance(data, dict) else None
    if type(version) is int and version > VERSION:  # before its fields are read: a newer one may have others
        raise NewerIndex(f"made by a newer specchat (index version {version}; this one reads {VERSION})")


def head_bits(capacity: int) -> int:
    """About one bucket per two tokens: chains stay short, the head array stays at 4 bytes per token."""
    return max(10, int(capacity - 1).bit_length() - 1)


@dataclass
class Meta:
    fingerprint: str
    capacity: int
    bits: int
    generation: str
    start: int = 0
    total: int = 0
    log_id: int = 0  # the last conversation-log message appended
    log_mark: str = ""  # that message's historylog.mark(): a new log has another message under that id
    version: int = VERSION

    @classmethod
    def read(cls, path: Path) -> Meta:
        if is_special(path):  # reading a FIFO would block the reply
            raise IndexDamaged(f"{path.name} is not a regular file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            _refuse_newer(data)
            meta = cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise IndexDamaged(f"unreadable {path.name} ({exc.__class__.__name__})") from None
        numbers = (meta.capacity, meta.bits, meta.start, meta.total, meta.log_id, meta.version)
        # Of the right types and within int64 positions: anything else is damage to rebuild, not a TypeError
        # or an OverflowError that left the history unused in every run.
        typed = all(type(n) is int for n in numbers) and all(
            isinstance(t, str) for t in (meta.fingerprint, meta.generation, meta.log_mark)
        )
        if not typed or not meta.total < 1 << 62 or not meta.log_id < 1 << 63:
            raise IndexDamaged(f"inconsistent {path.name}")
        sane = meta.version == VERSION and 0 <= meta.start <= meta.total and meta.total - meta.start <= meta.capacity
        if not sane or meta.bits != head_bits(meta.capacity) or not meta.generation.isalnum():
            raise IndexDamaged(f"inconsistent {path.name}")
        return meta

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.__dict__))


class HistoryIndex:
    """One folder's index: lookups through `chains`, appends under the lock. Raises IndexDamaged or
    OSError; History (history.py) turns both into a notice."""

    def __init__(
        self, folder: Path, fingerprint: str, capacity: int = DEFAULT_CAPACITY, n_vocab: int | None = None
    ) -> None:
        self.folder = folder
        self.n_vocab = n_vocab  # token ids at or beyond it are damage (None: only negative ones are)
        self.meta = Meta(fingerprint, capacity, head_bits(capacity), "")
        self.chains: Chains | None = None
        self.lock = FileLock(folder / LOCK_NAME)

    @property
    def meta_path(self) -> Path:
        return self.folder / "meta.json"

    def _file(self, name: str, generation: str | None = None) -> Path:
        return self.folder / f"{generation or self.meta.generation}.{name}"

    def _sizes(self, meta: Meta) -> dict[str, int]:
        return {"tokens": meta.capacity, "prev": meta.capacity, "head": 1 << meta.bits}

    def open(self, again: bool = True) -> None:
        """Map the committed index (IndexDamaged if there is none that adds up)."""
        meta = Meta.read(self.meta_path)
        if (meta.fingerprint, meta.capacity) != (self.meta.fingerprint, self.meta.capacity):
            raise IndexDamaged("made for another tokenizer or size")
        arrays = {}
        for name, count in self._sizes(meta).items():
            path = self._file(name, meta.generation)
            dtype = np.dtype(FILES[name])
            if not path.is_file() or path.stat().st_size != count * dtype.itemsize:
                raise IndexDamaged(f"{path.name} is missing or has the wrong size")
            if name == "head":  # mostly a hole, read anywhere: see HeadFile
                arrays[name] = HeadFile(path, count)
                continue
            # A plain ndarray view of the mapping: indexing a np.memmap itself costs microseconds a call.
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", shape=(count,)).view(np.ndarray)
        chains = Chains(
            arrays["tokens"], arrays["prev"], arrays["head"], meta.bits, meta.capacity, meta.start, meta.total
        )
        why = historycheck.damage_in(chains, self.n_vocab)
        if why and again and Meta.read(self.meta_path) != meta:  # a writer committed meanwhile (a reader of a
            return self.open(again=False)  # read-only index takes no lock): what it saw may be half-written
        if why:
            raise IndexDamaged(why)
        self.meta = meta
        self.chains = chains
        self._sync_window()

    def refresh(self) -> None:
        """Catch up with what other processes committed (a new generation is mapped afresh)."""
        meta = Meta.read(self.meta_path)
        if self.chains is None or meta.generation != self.meta.generation:
            self.open()
            return
        self.meta = meta
        self._sync_window()

    def _sync_window(self) -> None:
        assert self.chains is not None
        self.chains.start, self.chains.total = self.meta.start, self.meta.total

    def create(self) -> None:
        """A new, empty generation, committed; the old generation's files are removed (processes that
        have them mapped keep reading them until they refresh). Call with the lock held."""
        self.make_folder()
        old = self._generations()
        meta = Meta(self.meta.fingerprint, self.meta.capacity, self.meta.bits, uuid.uuid4().hex)
        try:
            self._commit(meta)
        except BaseException:  # uncommitted: its files would pile up, a set per failed run, until one succeeded
            committed = self._names(meta.generation)  # a Ctrl-C just after meta.json was replaced
            for path in old if committed else [self._file(name, meta.generation) for name in FILES]:
                _discard(path)
            raise
        for path in old:  # leftovers now: one that cannot go (a directory in its place) must not undo the rebuild
            _discard(path)
        self.meta = meta
        self.open()

    def _commit(self, meta: Meta) -> None:
        for name, count in self._sizes(meta).items():
            fd = os.open(self._file(name, meta.generation), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.truncate(count * np.dtype(FILES[name]).itemsize)  # sparse: disk use grows with use
        if is_special(self.meta_path) or self.meta_path.is_symlink():
            # A FIFO or a link (a loop, one that leads nowhere): write_atomic would write into it or where it
            # leads, or fail in every run, not replace it.
            self.meta_path.unlink()
        meta.write(self.meta_path)

    def _names(self, generation: str) -> bool:
        """Whether meta.json, as it is on disk now, names this generation."""
        try:
            return Meta.read(self.meta_path).generation == generation
        except Exception:  # no meta.json, or one that does not read: nothing is committed
            return False

    def make_folder(self) -> None:
        """The folder, readable by its owner only: the token ids spell out every logged conversation
        (the log itself is created 0600)."""
        for folder in (self.folder.parent, self.folder):
            if not folder.is_dir():
                make_dirs(folder, mode=0o700)

    def _generations(self) -> list[Path]:
        return [p for p in self.folder.glob("*.*") if p.suffix[1:] in FILES] if self.folder.is_dir() else []

    def append(self, tokens: np.ndarray, log_id: int, log_mark: str = "") -> None:
        """Append tokens (the newest `capacity` of them) and commit; call with the lock held, after
        refresh(), so that the chains and the window are the latest committed ones."""
        assert self.chains is not None
        tokens = np.asarray(tokens, dtype=np.int64)[-self.meta.capacity :]
        links = self.chains.links(tokens)
        end = links.base + len(tokens)
        if end - self.meta.capacity > self.meta.start:  # commit the eviction before overwriting its slots
            self.meta.start = end - self.meta.capacity
            self.meta.write(self.meta_path)
        self._write(links)
        if log_id > self.meta.log_id:
            self.meta.log_mark = log_mark
        self.meta.total, self.meta.log_id = end, max(self.meta.log_id, log_id)
        self.meta.write(self.meta_path)
        self._sync_window()

    def _write(self, links: Links) -> None:
        capacity = self.meta.capacity
        with open(self._file("tokens"), "r+b") as tok, open(self._file("prev"), "r+b") as prev:
            for slot, offset, count in slot_ranges(links.base, len(links.tokens), capacity):
                _put(tok, slot * 4, links.tokens[offset : offset + count])
                _put(prev, slot * 4, links.dist[offset : offset + count])
        with open(self._file("head"), "r+b") as head:
            if len(links.head_buckets) > WHOLE_HEAD:
                whole = np.array(self.chains.head)
                whole[links.head_buckets] = links.head_values
                _put(head, 0, whole)
                return
            for bucket, value in zip(links.head_buckets.tolist(), links.head_values.tolist(), strict=True):
                _put(head, bucket * 8, np.int64(value))


class HeadFile:
    """The hash heads, read from their file rather than mapped. The file is sparse and a lookup reads a bucket
    anywhere in it, most often in a hole (never written). On tmpfs a read through a mapping allocates a page for
    a hole, and where none is left (a full tmpfs) the process dies of SIGBUS, mid-reply; read() gives a hole's
    zeros and allocates nothing. The tokens and links are mapped: only their written part is ever read."""

    def __init__(self, path: Path, count: int) -> None:
        self.path, self.count = path, count
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # Windows: no newline translation
        weakref.finalize(self, os.close, self.fd)  # a new generation's heads replace these

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, int | np.integer):  # a lookup: one bucket
            # A file cut short behind our back (they never shrink) reads as an empty bucket, not an error.
            return np.frombuffer(self._read(int(index) * 8).ljust(8, b"\0"), dtype=np.int64)[0]
        index = np.asarray(index, dtype=np.int64)
        if len(index) > WHOLE_HEAD:  # a long append: one read of the whole file
            return np.asarray(self)[index]
        return np.array([self[i] for i in index.tolist()], dtype=np.int64)

    def _read(self, offset: int) -> bytes:
        if hasattr(os, "pread"):
            return os.pread(self.fd, 8, offset)
        os.lseek(self.fd, offset, os.SEEK_SET)  # Windows has no pread; one thread reads an index
        return os.read(self.fd, 8)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.fromfile(self.path, dtype=np.int64, count=self.count).astype(dtype or np.int64, copy=False)


def _discard(path: Path) -> None:
    """Remove an old generation's file, or an empty directory in its place; what cannot go is left."""
    with suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def _put(handle, offset: int, values) -> None:
    handle.seek(offset)
    handle.write(np.asarray(values).tobytes())
