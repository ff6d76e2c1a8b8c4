"""Writing the saved tunings, apart from reading them (tuning.py): the writers take turns on a lock, since one
that reads the file and writes it back could undo another process's write in between; the readers take no lock.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from .costmodel import Costs
from .paths import config_dir, make_dirs, write_atomic
from .tuning import Tuning, load, trusted, tuning_path


def worth_saving(measured: Tuning, previous: Tuning | None) -> tuple[Tuning | None, bool]:
    """(what `tune` saves, None for nothing; whether the saved costs were kept): a moment's load must not replace
    costs measured quietly, but how often the target accepts the draft's guesses load does not change, so the
    acceptance measured is saved beside the kept costs."""
    if not (measured.costs.busy and trusted(previous)):
        return measured, False
    priors = previous.priors | measured.priors
    return (replace(previous, priors=priors) if priors != previous.priors else None), True


def save_measured(measured: Tuning) -> tuple[Path | None, bool, Tuning | None]:
    """(the file `tune` saved, None for none; whether the saved costs were kept; the saved tuning it decided on):
    decided on the file as it is now, read again. Read before minutes of measuring, a stale mark a drifting run
    made meanwhile was undone, and a quiet calibration a run saved meanwhile replaced by the old costs."""
    path = tuning_path(measured.key)
    with _writing():
        previous = load(measured.key)
        saving, kept = worth_saving(measured, previous)
        if saving is not None:
            _write(saving)
    return (None if saving is None else path), kept, previous


def check_writable() -> None:
    """Before `tune` measures for minutes: the folder its result goes to can be written (OSError if not)."""
    folder = config_dir() / "tuning"
    make_dirs(folder)
    _probe(folder)


def _probe(folder: Path) -> None:
    """The folder takes a new file, as save's temporary file beside the tuning (OSError if not)."""
    import tempfile

    with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-", suffix=".tmp"):
        pass


def check_replaceable(key: str) -> None:
    """Before `tune` loads the models, once the key is known: what stands at the tuning's path can be replaced,
    which the save found out only after minutes of measuring. A directory (a link to one too) is
    IsADirectoryError; a link is written through (write_atomic), so a loop of links or one into a folder that is
    missing or takes no new files is the save's own OSError, as is a FIFO that nobody reads."""
    import errno
    import os

    from .paths import is_special, refuse_read_only, resolve_link

    path = tuning_path(key)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if is_special(path):  # written into, not replaced: opened as the save opens it
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    elif path.is_symlink():
        _probe(resolve_link(path).parent)
    refuse_read_only(resolve_link(path) if path.is_symlink() else path)  # as the save would, after the measuring


def save(tuning: Tuning) -> Path:
    """Atomic, so concurrent first runs cannot collide; in turn with the other writers (_writing)."""
    with _writing():
        _write(tuning)
    return tuning_path(tuning.key)


def save_calibration(tuning: Tuning) -> None:
    """A run's quiet calibration, unless the file now holds a trusted tuning, saved by another process while this
    one measured: a quick calibration replaced a `tune` that ended meanwhile, its batches and acceptance."""
    with _writing():
        current = load(tuning.key)
        if trusted(current):
            return
        if current is not None and current.priors:  # a `tune` under load saved its measured acceptance meanwhile
            tuning = replace(tuning, priors=current.priors)
        _write(tuning)


def _write(tuning: Tuning) -> None:
    write_atomic(tuning_path(tuning.key), json.dumps(tuning.as_dict(), indent=2), keep_read_only=True)


LOCK_WAIT_S = 5.0  # a writer holds the lock for a read and a write, milliseconds


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    """Writers of the saved tunings take turns (a lock file in their folder, kept: one removed while another
    process waited would let both in), so that one that reads a file and writes it back (mark_stale, tune's save)
    cannot undo a write another process made in between. Where it cannot be taken (a folder not there or
    read-only, a file system without locks, a writer that hangs), the write goes ahead without it, as before. The
    folder is made first (OSError if it cannot be), as every write needs it."""
    from filelock import FileLock

    folder = config_dir() / "tuning"
    make_dirs(folder)
    lock: FileLock | None = FileLock(folder / ".lock")
    try:
        lock.acquire(timeout=LOCK_WAIT_S)
    except (OSError, NotImplementedError):  # filelock's Timeout is an OSError too
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def mark_stale(tuning: Tuning) -> None:
    """The machine ran at another speed than the saved calibration says: measure again next start. Only the
    calibration the run drifted from: one another run saved since is of the machine as it is now."""
    if not tuning_path(tuning.key).is_file():  # nothing to mark: no lock (nor its folder) made for it
        return
    with _writing():
        saved = load(tuning.key)
        if saved is None or saved.stale or _measurement(saved.costs) != _measurement(tuning.costs):
            return
        saved.stale = True
        with contextlib.suppress(OSError):  # then it is simply trusted once more
            _write(saved)


def _measurement(costs: Costs) -> tuple:
    """What tells one measurement from another (as saved: a drifting run's step_s has moved since)."""
    return costs.verify, costs.draft_step, costs.calibrated_step_s, costs.busy
