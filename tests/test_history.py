"""The persistent history index: lookups against a brute-force reference, persistence, eviction, damage,
concurrent writers, and its update from the conversation log."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sqlite3
import threading
from contextlib import closing

import numpy as np
import pytest

from specchat import history as history_mod
from specchat.drafters.suffix import lookup
from specchat.history import History
from specchat.historyindex import HistoryIndex, IndexDamaged
from specchat.historytokens import fingerprint
from specchat.logdb import connect, transaction
from specchat.tokenchains import LONGEST, ORDER, SEP, GrowingChains

OFFSET = 5


class Tokenizer:
    """A byte tokenizer with the engine's vocabulary methods (ids = byte + 5)."""

    n_vocab = 261
    vocab_type = 2

    def tokenize(self, text: str) -> list[int]:
        return [b + OFFSET for b in text.encode()]

    def token_text(self, token: int) -> bytes:
        return bytes([token - OFFSET]) if OFFSET <= token < 261 else b"<special>"


def fresh(folder, capacity=1000) -> HistoryIndex:
    index = HistoryIndex(folder / "fp", "fp", capacity)
    with index.lock:
        index.create()
    return index


def reference(tokens: list[int], start: int, tail: list[int], k: int) -> tuple[int, list[list[int]]]:
    """(deepest match length, continuations of the matches that deep, most recent first), by brute force."""
    found = []
    for f in range(len(tokens) - 1, start + ORDER - 1, -1):
        gram = tokens[f - ORDER : f]
        if SEP in gram or tokens[f] == SEP or gram != tail[-ORDER:]:
            continue
        length = 0
        while length < min(LONGEST, len(tail)) and f - 1 - length >= start:
            if tokens[f - 1 - length] != tail[-1 - length]:
                break
            length += 1
        rest = []
        for token in tokens[f : f + k]:
            if token == SEP:
                break
            rest.append(token)
        found.append((length, rest))
    if not found:
        return 0, []
    deepest = max(length for length, _ in found)
    return deepest, [rest for length, rest in found if length == deepest]


def majority(rests: list[list[int]], k: int) -> list[int]:
    """Conditional votes, by brute force: the most frequent next token (ties: the most recent match)."""
    out: list[int] = []
    while len(out) < k:
        votes = [r[len(out)] for r in rests if len(r) > len(out) and r[: len(out)] == out]
        if not votes:
            return out
        out.append(max(dict.fromkeys(votes), key=votes.count))  # max keeps the first of equal counts
    return out


def array_sizes(folder) -> list[int]:
    return sorted(p.stat().st_size for p in folder.iterdir() if p.suffix in (".tokens", ".prev", ".head"))


def test_lookup_agrees_with_brute_force_across_eviction(tmp_path):
    rng = np.random.default_rng(1)
    index = fresh(tmp_path, capacity=600)
    written: list[int] = []
    phrases = [list(rng.integers(0, 12, 20)) for _ in range(5)]  # repeated passages, small vocabulary
    for step in range(40):
        batch = [*phrases[step % 5][: rng.integers(5, 20)], *rng.integers(0, 12, 15), SEP]
        index.append(np.array(batch), step + 1)
        written += [int(t) for t in batch]
        start = max(0, len(written) - 600)
        assert (index.meta.start, index.meta.total) == (start, len(written))
        tail = [int(t) for t in phrases[rng.integers(0, 5)][:10]]
        guess = lookup([index.chains], tail, 8)
        deepest, rests = reference(written, start, tail, 8)
        assert guess.matched == deepest
        assert guess.tokens == majority(rests, 8)
        assert guess.support[:1] == ([len(rests)] if rests else [])


def test_frequencies_are_conditional_votes(tmp_path):
    index = fresh(tmp_path)
    for tail in ([7, 8], [7, 8], [7, 9], [6]):  # after "1 2 3 4 5": 7 three times of four, then 8 twice of three
        index.append(np.array([1, 2, 3, 4, 5, *tail, SEP]), 1)
    guess = lookup([index.chains], [0, 1, 2, 3, 4, 5], 4)
    assert guess.tokens == [7, 8]
    assert guess.support == [4, 3] and guess.agree == [3, 2]


def test_reopen_sees_what_was_appended(tmp_path):
    index = fresh(tmp_path)
    index.append(np.array([1, 2, 3, 4, 5, 6, SEP]), 3)
    again = HistoryIndex(tmp_path / "fp", "fp", 1000)
    again.open()
    assert again.meta.log_id == 3 and lookup([again.chains], [1, 2, 3, 4], 4).tokens == [5, 6]
    index.append(np.array([1, 2, 3, 4, 9, SEP]), 4)
    again.refresh()
    assert lookup([again.chains], [1, 2, 3, 4], 4).tokens == [9]  # a tie: the most recent wins


def test_eviction_bounds_the_window_and_the_files(tmp_path):
    index = fresh(tmp_path, capacity=200)
    sizes = array_sizes(tmp_path / "fp")
    index.append(np.array([1, 2, 3, 4, 77, SEP]), 1)
    for i in range(50):
        index.append(np.arange(10, 20) + i % 3, i + 2)
    assert index.meta.total - index.meta.start == 200
    assert array_sizes(tmp_path / "fp") == sizes
    assert lookup([index.chains], [1, 2, 3, 4], 4).tokens == []  # the first message is gone
    index.append(np.arange(1000, 1500), 99)  # more than the capacity at once: the newest part is kept
    assert lookup([index.chains], [1000, 1001, 1002, 1003], 2).tokens == []
    assert lookup([index.chains], [1400, 1401, 1402, 1403], 2).tokens == [1404, 1405]
    assert index.chains.continuations(np.array([index.meta.total - 1]), 1).tolist() == [[1499]]


def test_damage_is_detected(tmp_path):
    index = fresh(tmp_path)
    index.append(np.array([1, 2, 3, 4, 5, SEP]), 1)
    next((tmp_path / "fp").glob("*.prev")).write_bytes(b"short")
    with pytest.raises(IndexDamaged):
        HistoryIndex(tmp_path / "fp", "fp", 1000).open()
    (tmp_path / "fp" / "meta.json").write_text("{not json")
    with pytest.raises(IndexDamaged):
        HistoryIndex(tmp_path / "fp", "fp", 1000).open()
    with pytest.raises(IndexDamaged):  # another tokenizer's index is never used
        HistoryIndex(tmp_path / "fp", "other", 1000).open()


def test_a_meta_whose_window_exceeds_the_capacity_is_damage(tmp_path):
    index = fresh(tmp_path)
    index.append(np.array([1, 2, 3, 4, 5, SEP]), 1)
    HistoryIndex(tmp_path / "fp", "fp", 1000).open()  # as committed: fine
    index.meta.start, index.meta.total = 10, 1011  # 1,001 tokens in a ring of 1,000
    index.meta.write(index.meta_path)
    with pytest.raises(IndexDamaged):
        HistoryIndex(tmp_path / "fp", "fp", 1000).open()


def test_the_last_log_message_indexed_never_moves_back(tmp_path):
    """meta.log_id is a high-water mark: an append tagged with an older message id (History appends
    under the lock after a refresh, so it never makes one) does not make later updates index again
    what is already indexed."""
    index = fresh(tmp_path)
    index.append(np.array([1, 2, 3, 4, 5, SEP]), 5)
    index.append(np.array([1, 2, 3, 4, 6, SEP]), 3)
    again = HistoryIndex(tmp_path / "fp", "fp", 1000)
    again.open()
    assert index.meta.log_id == again.meta.log_id == 5


def test_a_dead_writers_links_are_ignored(tmp_path):
    """A writer that died after writing the head but before committing left links to positions past the
    committed end: the next append must not chain through them."""
    index = fresh(tmp_path)
    index.append(np.array([1, 2, 3, 4, 5, SEP]), 1)
    bucket_links = index.chains.links(np.array([9, 1, 2, 3, 4, 6, SEP]))
    index._write(bucket_links)  # written, never committed
    # The dead writer's head points at its 6 (past the committed end): no new position links to it.
    assert index.chains.links(np.array([9, 9, 1, 2, 3, 4, 7, SEP])).dist.tolist() == [0] * 8
    index.append(np.array([1, 2, 3, 4, 7, SEP]), 2)
    assert lookup([index.chains], [1, 2, 3, 4], 2).tokens == [7]
    assert lookup([index.chains], [1, 2, 3, 4], 2).support == [1]  # 5 was lost with the broken chain, never 6


def _writer(folder: str, marker: int, batches: int) -> None:
    from pathlib import Path

    index = HistoryIndex(Path(folder) / "fp", "fp", 100_000)
    for i in range(batches):
        with index.lock.acquire(timeout=30):
            index.refresh()
            index.append(np.array([marker, i, *range(100, 140), marker, SEP]), 0)


def test_two_processes_appending_do_not_corrupt_it(tmp_path):
    fresh(tmp_path, capacity=100_000)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    workers = [context.Process(target=_writer, args=(str(tmp_path), m, 40)) for m in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    index = HistoryIndex(tmp_path / "fp", "fp", 100_000)
    index.open()
    assert index.meta.total == 2 * 40 * 44
    records = np.array(np.asarray(index.chains.tokens[: index.meta.total]).reshape(-1, 44))
    assert set(records[:, 0]) == {1, 2} and (records[:, 0] == records[:, 42]).all() and (records[:, 43] == SEP).all()
    for marker in (1, 2):
        assert sorted(records[records[:, 0] == marker, 1]) == list(range(40))  # every batch once, whole
    for marker in (1, 2):
        for i in range(40):  # every batch is found by its own n-gram: the chains are intact
            guess = lookup([index.chains], [marker, i, 100, 101], 40)
            assert guess.tokens[:38] == list(range(102, 140)) and guess.support[0] == 1


# -- from the conversation log -----------------------------------------------------------------------------


def log_messages(path, *texts: str) -> None:
    with connect(path) as conn, transaction(conn):
        cid = conn.execute("INSERT INTO conversations (created) VALUES ('now')").lastrowid
        for i, text in enumerate(texts):
            conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created) VALUES (?, ?, ?, 'now')",
                (cid, "user" if i % 2 == 0 else "assistant", text),
            )


def open_history(tmp_path, notes):
    return History.open(Tokenizer(), notes.append, folder=tmp_path / "history", log=tmp_path / "logs.db")


def test_history_follows_the_log_and_notices_damage(tmp_path):
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past = open_history(tmp_path, notes)
    assert lookup([past.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")
    past.update()
    assert lookup([past.chains], Tokenizer().tokenize("old pond, "), 3).support[0] == 2
    assert notes == []  # a first build is silent
    meta = next((tmp_path / "history").glob("*/meta.json"))
    meta.write_text("garbage")
    again = open_history(tmp_path, notes)
    assert len(notes) == 1 and "damaged" in notes[0] and "rebuilt" in notes[0]
    assert lookup([again.chains], Tokenizer().tokenize("old pond, "), 3).support[0] == 2  # rebuilt from the log


def test_a_message_that_is_not_utf8_is_indexed_with_its_bad_bytes_replaced(tmp_path):
    """One message that is not UTF-8 (another program's, a disk error) turned the whole history off:
    "history: not used in this run (... Could not decode to UTF-8 column 'content')"."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in", "bad", "bytes")
    with closing(sqlite3.connect(tmp_path / "logs.db")) as conn, conn:
        conn.execute("UPDATE messages SET content = CAST(x'48c3ff' AS TEXT) WHERE content = 'bad'")
        conn.execute("UPDATE messages SET content = x'48c3ff' WHERE content = 'bytes'")  # a BLOB: bytes in the rows
    past = open_history(tmp_path, notes)
    assert notes == [] and past.chains is not None
    assert lookup([past.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")


def test_an_unusable_history_is_one_notice_and_no_error(tmp_path, monkeypatch):
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "hello there", "general kenobi")
    (tmp_path / "history").write_text("a file where the folder should be")
    past = open_history(tmp_path, notes)
    assert past.chains is None and len(notes) == 1 and "not used" in notes[0]
    past.update()
    assert len(notes) == 1


def test_opt_out_and_fingerprint(monkeypatch):
    assert history_mod.enabled(False) and not history_mod.enabled(True)
    monkeypatch.setenv("SPECCHAT_NO_HISTORY", "1")
    assert not history_mod.enabled(False)
    for off in ("", "0", "false", " NO ", "off"):
        monkeypatch.setenv("SPECCHAT_NO_HISTORY", off)
        assert history_mod.enabled(False), off
    monkeypatch.setenv("SPECCHAT_NO_HISTORY", "yes")
    assert not history_mod.enabled(False)
    other = Tokenizer()
    other.n_vocab = 300
    assert fingerprint(Tokenizer()) != fingerprint(other)
    assert fingerprint(object()) is None


def test_history_root_follows_the_data_dir_and_is_private(private_log):
    assert history_mod.root() == private_log / "history"
    log_messages(private_log / "logs.db", "something to index")
    past = History.open(Tokenizer(), print)
    assert past.index.folder.parent == private_log / "history"
    for path in (past.index.folder.parent, past.index.folder, *past.index.folder.glob("*.tokens")):
        assert path.stat().st_mode & 0o077 == 0, path


@pytest.fixture
def read_only(monkeypatch):
    """read_only(folder, below=True): os.access refuses writing in it (and below it: chmod -R), as for another
    user's folder (the tests run as root, whom permissions do not stop)."""
    denied: list[tuple[str, bool]] = []
    real = os.access

    def access(path, mode, *args, **kwargs):
        inside = any(str(path) == d or (below and str(path).startswith(f"{d}{os.sep}")) for d, below in denied)
        return False if inside and mode & os.W_OK else real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return lambda folder, below=True: denied.append((str(folder), below))


def test_a_read_only_history_folder_is_used_as_it_is_with_one_notice(private_log, read_only):
    """A read-only history folder: the history was dropped for the run; where the lock could not be
    taken, in silence. The committed index is drafted from, unchanged, and one notice says so, naming
    the folder and the variable that moves it."""
    log = private_log / "logs.db"
    log_messages(log, "write a haiku", "old pond, a frog jumps in")
    built = History.open(Tokenizer(), print)
    read_only(history_mod.root())
    log_messages(log, "again", "old pond, the water's sound")
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append, logging=True)
    past.update()
    assert lookup([past.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    assert past.index.meta.total == built.index.meta.total  # nothing written
    assert len(notes) == 1 and "frozen" in notes[0] and str(past.index.folder) in notes[0], notes
    assert "SPECCHAT_DATA_DIR" in notes[0]


def test_a_read_only_history_that_lacks_nothing_is_no_notice_without_logging(private_log, read_only):
    """--no-log: this run adds nothing to the log, so a read-only index that has all of it loses nothing."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    read_only(history_mod.root())
    notes: list[str] = []
    assert History.open(Tokenizer(), notes.append).chains is not None and notes == []
    log_messages(private_log / "logs.db", "again", "old pond, the water's sound")  # another process logged these
    assert History.open(Tokenizer(), notes.append).chains is not None and len(notes) == 1 and "frozen" in notes[0]


@pytest.mark.parametrize("log_state", ["emptied, its -wal left", "not a database"])
def test_a_read_only_history_beside_an_unreadable_log_is_no_internal_error(private_log, read_only, log_state):
    """--no-log with a read-only history: the notice asked the log how far it went, outside any guard, and a
    log that cannot be read (emptied beside a leftover -wal, or not SQLite) ended the run as an internal error."""
    log = private_log / "logs.db"
    log_messages(log, "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    read_only(history_mod.root())
    if log_state == "not a database":
        log.write_bytes(b"not SQLite at all" * 100)
    else:
        log.write_bytes(b"")
        (private_log / "logs.db-wal").write_bytes(b"messages only here" * 100)
    notes: list[str] = []
    assert History.open(Tokenizer(), notes.append).chains is not None  # what the index has is drafted from


def test_a_read_only_data_folder_is_one_notice_where_the_run_logs(private_log, read_only):
    """A read-only data folder: no reply reaches the log, so the history stays as it was; that was not said."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    read_only(private_log, below=False)  # chmod a-w data: the history's own folder is still writable
    notes: list[str] = []
    assert History.open(Tokenizer(), notes.append, logging=False).chains is not None and notes == []  # --no-log
    past = History.open(Tokenizer(), notes.append, logging=True)
    assert past.chains is not None and len(notes) == 1 and "frozen" in notes[0], notes
    assert f"{private_log} is read-only" in notes[0] and "SPECCHAT_DATA_DIR" in notes[0]


def test_a_read_only_log_file_is_named_itself(private_log, read_only):
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    read_only(private_log / "logs.db")  # its folder is writable: it is the file that is in the way
    notes: list[str] = []
    History.open(Tokenizer(), notes.append, logging=True)
    assert len(notes) == 1 and f"{private_log / 'logs.db'} is read-only" in notes[0], notes


def test_a_history_that_cannot_be_made_is_off_with_one_notice(private_log, read_only):
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    read_only(private_log)
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append)
    past.update()
    assert past.chains is None and not history_mod.root().exists()
    assert len(notes) == 1 and "off in this run" in notes[0] and f"{private_log} is read-only" in notes[0], notes


def test_a_read_only_folder_above_the_data_folder_still_names_the_variable(tmp_path, monkeypatch, read_only):
    """SPECCHAT_DATA_DIR under a read-only folder, not made yet: that folder is in none of specchat's folders,
    and the notice named no variable, though SPECCHAT_DATA_DIR is what moves the data elsewhere."""
    base = tmp_path / "shared"
    base.mkdir()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(base / "not" / "yet"))
    read_only(base)
    notes: list[str] = []
    History.open(Tokenizer(), notes.append, logging=True)
    assert len(notes) == 1 and f"{base} is read-only" in notes[0] and "SPECCHAT_DATA_DIR" in notes[0], notes


def test_a_directory_or_file_in_the_indexs_way_is_named_with_the_way_out(private_log):
    """A directory where meta.json should be, or a file where the index's folder should be, left the history
    unused in every run with a bare "Is a directory" note: the note names what to move aside."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    folder = History.open(Tokenizer(), print).index.folder
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    notes: list[str] = []
    History.open(Tokenizer(), notes.append)
    assert any(f"move {folder / 'meta.json'} aside" in note for note in notes), notes
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    notes.clear()
    History.open(Tokenizer(), notes.append)
    assert any(f"{folder} is not a directory" in note and "remove or rename that file" in note for note in notes)


def test_continuations_end_at_the_end_of_their_message():
    """SEP from a message's end on: no continuation runs into the next message."""
    chains = GrowingChains(bits=12)
    chains.append(np.array([1, 2, 3, 4, 5, SEP, 6, 7, 8]))
    rows = chains.continuations(np.array([3, 4, 7]), 4).tolist()
    assert rows == [[4, 5, SEP, SEP], [5, SEP, SEP, SEP], [7, 8, SEP, SEP]]


def test_conversation_chains_grow():
    chains = GrowingChains(bits=10)
    for start in range(0, 5000, 100):
        chains.append(np.arange(start, start + 100) % 50)
    assert chains.total == 5000
    assert lookup([chains], [10, 11, 12, 13], 3).tokens == [14, 15, 16]


def test_log_without_messages_is_no_error(tmp_path):
    notes: list[str] = []
    sqlite3.connect(tmp_path / "logs.db").close()  # an empty file, as a crash right after creating it leaves
    past = open_history(tmp_path, notes)
    assert past.chains is None and notes == [], notes  # nothing to index: no index yet


def test_nothing_to_index_makes_no_index_until_a_message_is_logged(tmp_path):
    """--no-log on a new data folder: the history made an empty (96 MB sparse) index that nothing would
    ever fill. None is made while the log holds nothing; the first update after a message builds it."""
    notes: list[str] = []
    past = open_history(tmp_path, notes)
    past.update()
    assert past.chains is None and not (tmp_path / "history").exists() and notes == []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past.update()
    assert lookup([past.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    assert notes == []


def test_one_bucket_is_the_vectorized_one():
    from specchat.tokenchains import bucket, buckets

    windows = np.random.default_rng(0).integers(0, 160_000, (200, ORDER))
    assert [bucket(w.tolist(), 22) for w in windows] == buckets(windows, 22).tolist()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_for_meta_is_rebuilt_not_waited_on(tmp_path):
    """A FIFO in place of meta.json hung `run --mode suffix` (and auto) forever, reading it before the reply;
    it is damage like any other: one notice, rebuilt from the log."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    meta = next((tmp_path / "history").glob("*/meta.json"))
    meta.unlink()
    os.mkfifo(meta)
    opened = []
    reader = threading.Thread(target=lambda: opened.append(open_history(tmp_path, notes)), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # a hang fails the test, not the suite: a writer that goes at once ends the read
        os.close(os.open(meta, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the history waited on a FIFO")
    again = opened[0]
    assert len(notes) == 1 and "not a regular file" in notes[0] and "rebuilt" in notes[0], notes
    assert lookup([again.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    assert meta.is_file()


@pytest.mark.parametrize(
    "change",
    [
        {"capacity": "1000"},
        {"generation": 5},
        {"total": 5.5},
        {"start": 10**24, "total": 10**24 + 6},
        {"log_id": 10**30},
    ],
)
def test_meta_with_numbers_of_the_wrong_kind_is_rebuilt(tmp_path, change):
    """A meta.json whose numbers were strings, floats or beyond int64 left the history unused in every run
    ("not used in this run (...: '<=' not supported between instances of 'int' and 'str')"), or, with a
    log_id too large, never updated again; it is damage: one notice, rebuilt from the log."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    meta = next((tmp_path / "history").glob("*/meta.json"))
    meta.write_text(json.dumps({**json.loads(meta.read_text()), **change}))
    again = open_history(tmp_path, notes)
    assert len(notes) == 1 and "damaged" in notes[0] and "rebuilt" in notes[0], notes
    assert lookup([again.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    open_history(tmp_path, notes)
    assert len(notes) == 1, notes


def test_a_rebuild_that_fails_is_one_notice(tmp_path):
    """A directory in place of meta.json: the index was announced as "damaged: rebuilt from the log", then,
    as the rebuild could not write meta.json, as "not used in this run": two notices, the first untrue."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    meta = next((tmp_path / "history").glob("*/meta.json"))
    meta.unlink()
    meta.mkdir()
    again = open_history(tmp_path, notes)
    assert again.chains is None and len(notes) == 1 and "not used" in notes[0], notes


def test_a_log_that_is_not_a_database_is_named_as_the_fault(tmp_path):
    """The notice named the index's folder for "file is not a database", a fault of the conversation log."""
    notes: list[str] = []
    (tmp_path / "logs.db").write_bytes(b"not sqlite at all, " * 100)
    assert open_history(tmp_path, notes).chains is None
    assert len(notes) == 1 and f"({tmp_path / 'logs.db'}: file is not a database)" in notes[0], notes


def test_a_new_log_is_followed(tmp_path):
    """After logs.db was moved aside (a new log starts at id 1), the index still held the old log's last id,
    so the new log's messages were not indexed until the new log outgrew the old one (and those below
    that id never); the index starts again from the new log."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in", "more", "and more", "x", "y")
    past = open_history(tmp_path, notes)
    (tmp_path / "logs.db").rename(tmp_path / "old.db")
    log_messages(tmp_path / "logs.db", "write a limerick", "there once was a man from Peru")
    past.update()
    tail = Tokenizer().tokenize("there once")
    assert lookup([past.chains], tail, 8).tokens == Tokenizer().tokenize(" was a m")
    assert open_history(tmp_path, notes).index.meta.log_id == 2 and notes == []


def test_a_new_log_that_caught_up_with_the_old_one_is_followed(tmp_path):
    """A new log (logs.db moved aside) that had as many messages as the index had taken before the next update
    looked like the old one: the old log's text stayed in the index and the new log's first messages were
    never taken. The message under the index's last id tells the logs apart."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    (tmp_path / "logs.db").rename(tmp_path / "old.db")
    log_messages(tmp_path / "logs.db", "write a limerick", "there once was a man from Peru")
    past = open_history(tmp_path, notes)
    tokenize = Tokenizer().tokenize
    assert lookup([past.chains], tokenize("there once"), 8).tokens == tokenize(" was a m")
    assert lookup([past.chains], tokenize("old pond"), 8).tokens == [] and notes == []
    generation = past.index.meta.generation
    log_messages(tmp_path / "logs.db", "more", "and more")  # the usual case: appended, not started again
    past.update()
    assert (past.index.meta.log_id, past.index.meta.generation) == (4, generation)


def _damage_ids_beyond_the_vocabulary(folder, meta):
    tokens = np.memmap(folder / f"{meta['generation']}.tokens", dtype=np.int32, mode="r+")
    tokens[meta["total"] - 8 : meta["total"] - 3] = Tokenizer.n_vocab + 1000  # another model's ids


def _damage_flipped_bytes(folder, meta):
    path = folder / f"{meta['generation']}.tokens"
    data = bytearray(path.read_bytes())
    for at in range(4 * (meta["total"] // 2), 4 * (meta["total"] // 2) + 12, 4):
        data[at + 1] ^= 0x01  # still inside the vocabulary? no: + 256; in a big vocabulary it would be
    path.write_bytes(bytes(data))


def _damage_flipped_bits_in_vocabulary(folder, meta):
    tokens = np.memmap(folder / f"{meta['generation']}.tokens", dtype=np.int32, mode="r+")
    tokens[2:6] ^= 0x03  # other ids of the same vocabulary ("write" is ids 124..): the links no longer add up


def _damage_broken_prev_chain(folder, meta):
    prev = np.memmap(folder / f"{meta['generation']}.prev", dtype=np.uint32, mode="r+")
    linked = prev[: meta["total"]] != 0
    assert linked.any()
    prev[: meta["total"]][linked] += 1  # each link now leads into another n-gram


def _damage_zeroed_heads(folder, meta):
    head = folder / f"{meta['generation']}.head"
    head.write_bytes(bytes(head.stat().st_size))  # a sparse copy that lost its data, same size


def _damage_random_bytes(folder, meta):
    for name in ("tokens", "prev"):
        path = folder / f"{meta['generation']}.{name}"
        data = np.random.default_rng(7).integers(0, 256, path.stat().st_size, dtype=np.uint8)
        path.write_bytes(data.tobytes())


def _damage_random_links(folder, meta):
    path = folder / f"{meta['generation']}.prev"
    path.write_bytes(np.random.default_rng(7).integers(0, 256, path.stat().st_size, dtype=np.uint8).tobytes())


def _damage_truncated(folder, meta):
    path = folder / f"{meta['generation']}.tokens"
    with open(path, "r+b") as handle:
        handle.truncate(4 * meta["total"] // 2)


def _damage_another_tokenizers_index(folder, meta):
    (folder / "meta.json").write_text(json.dumps({**meta, "fingerprint": "0123456789abcdef"}))


@pytest.mark.parametrize(
    "damage",
    [
        _damage_ids_beyond_the_vocabulary,
        _damage_flipped_bytes,
        _damage_flipped_bits_in_vocabulary,
        _damage_broken_prev_chain,
        _damage_zeroed_heads,
        _damage_random_bytes,
        _damage_random_links,
        _damage_truncated,
        _damage_another_tokenizers_index,
    ],
)
def test_damaged_index_files_are_rebuilt_from_the_log(tmp_path, damage):
    """Files of the right size whose token ids, links or heads do not add up (ids beyond the vocabulary,
    flipped bytes, a broken prev chain, heads lost) were mapped as they were: the damage was harmless to
    each reply (the target checks every token) but stayed for good, and the history drafted nothing, or
    garbage, in every later run. Opening checks a sample of the window: one notice, rebuilt from the log."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in", "again", "old pond, the splash")
    open_history(tmp_path, notes)
    meta_path = next((tmp_path / "history").glob("*/meta.json"))
    damage(meta_path.parent, json.loads(meta_path.read_text()))
    again = open_history(tmp_path, notes)
    assert len(notes) == 1 and str(meta_path.parent) in notes[0] and "rebuilt" in notes[0], notes
    assert lookup([again.chains], Tokenizer().tokenize("old pond, "), 3).support[0] == 2  # the whole log again
    open_history(tmp_path, notes)
    assert len(notes) == 1, notes


def test_an_index_that_adds_up_is_not_rebuilt(tmp_path):
    """The check at open passes every index the writers make: across eviction, messages longer than the
    capacity, and windows larger than the sample."""
    rng = np.random.default_rng(3)
    index = HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300)
    with index.lock:
        index.create()
    for step in range(60):
        index.append(np.array([*rng.integers(0, 300, int(rng.integers(1, 900))), SEP]), step + 1)
        HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300).open()
    index.append(rng.integers(0, 300, 25_000), 99)
    HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300).open()
    with pytest.raises(IndexDamaged, match="links"):  # a window larger than the sample: damage is found in it
        _damage_random_links(tmp_path / "fp", index.meta.__dict__)
        HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300).open()


def test_the_check_at_open_reads_a_few_pages_of_a_big_index():
    """The sample was 4,096 positions spread at random: on a full index (32 MB of tokens) as many pages,
    which a cold disk reads one seek each. Now a few runs of neighbours, and links followed for a few hundred."""
    from specchat import historycheck
    from specchat.historyindex import DEFAULT_CAPACITY

    sample = historycheck._sample(0, DEFAULT_CAPACITY)
    assert len(sample) == historycheck.RUNS * historycheck.RUN + historycheck.NEWEST
    assert len(set((sample * 4 // 4096).tolist())) <= 2 * historycheck.RUNS + 2  # pages of the tokens file


def test_a_read_only_index_seen_while_its_writer_commits_is_looked_at_again(tmp_path, monkeypatch):
    """A reader of a read-only index takes no lock: one that sampled slots a writer was rewriting (it commits
    the eviction, then writes) read them as damage and ran without history. A meta.json that changed under
    the check is read again, once."""
    from specchat import historycheck

    rng = np.random.default_rng(5)
    index = HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300)
    with index.lock:
        index.create()
    index.append(np.array([*rng.integers(0, 300, 500), SEP]), 1)
    real, seen = historycheck.damage_in, []

    def torn_once(chains, n_vocab):
        if not seen:  # the writer commits while this reader checks
            seen.append(True)
            index.append(np.array([*rng.integers(0, 300, 50), SEP]), 2)
            return "links between different n-grams"
        return real(chains, n_vocab)

    monkeypatch.setattr(historycheck, "damage_in", torn_once)
    reader = HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300)
    reader.open()
    assert reader.meta.log_id == 2
    seen.clear()
    monkeypatch.setattr(historycheck, "damage_in", lambda chains, n_vocab: "links between different n-grams")
    with pytest.raises(IndexDamaged):  # damage that stays when nothing was committed is damage
        HistoryIndex(tmp_path / "fp", "fp", 20_000, n_vocab=300).open()


def test_a_read_only_index_once_rebuilt_is_no_longer_called_damaged(private_log, read_only):
    """The notice's 'its index damaged' stayed with the history after a writer had rebuilt the index."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    meta_path = next(history_mod.root().glob("*/meta.json"))
    meta = json.loads(meta_path.read_text())
    _damage_zeroed_heads(meta_path.parent, meta)
    read_only(history_mod.root())
    frozen = History.open(Tokenizer(), print)
    assert frozen.damaged
    shutil.rmtree(meta_path.parent)  # whoever may write there starts it again
    writer = History.open(Tokenizer(), print, folder=history_mod.root())
    writer.frozen = False
    writer.update()
    assert writer.index.meta_path.exists()
    frozen.update()
    assert frozen.damaged is None


def test_a_damaged_read_only_index_is_off_with_one_notice_that_says_so(private_log, read_only):
    """A damaged index in a read-only folder cannot be rebuilt: it was left out with 'off in this run: DIR is
    read-only', as if there were no index, which hid why making the folder writable brings it back."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    meta_path = next(history_mod.root().glob("*/meta.json"))
    _damage_zeroed_heads(meta_path.parent, json.loads(meta_path.read_text()))
    read_only(history_mod.root())
    notes: list[str] = []
    assert History.open(Tokenizer(), notes.append, logging=True).chains is None
    assert len(notes) == 1 and "off in this run" in notes[0] and "damaged (hash heads" in notes[0], notes
    assert str(meta_path.parent) in notes[0] and "SPECCHAT_DATA_DIR" in notes[0], notes


def test_reading_the_log_never_deletes_a_wal_left_beside_an_empty_log(tmp_path):
    """An emptied logs.db beside the -wal of the log it was (its latest messages): even a read-only SQLite
    connection takes that -wal for the empty log's and deletes it, and the history read the log so before
    each reply. It is the log's fault: one notice, and the -wal is kept."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    wal = tmp_path / "logs.db-wal"
    wal.write_bytes(b"the old log's latest messages" * 100)
    (tmp_path / "logs.db").write_bytes(b"")
    assert open_history(tmp_path, notes).chains is None
    assert wal.read_bytes() == b"the old log's latest messages" * 100
    assert len(notes) == 1 and "logs.db-wal is left from a log" in notes[0], notes


@pytest.mark.parametrize("logging", [True, False])
def test_a_log_damaged_in_the_middle_is_set_aside_where_the_run_logs(tmp_path, logging):
    """A page damaged in the middle of the log, which a reply's write may never touch: a new index read it
    and said 'not used in this run (... malformed)' in every run, without a way out."""
    log = tmp_path / "logs.db"
    for n in range(40):
        log_messages(log, f"prompt {n} " + "x" * 3000, "y" * 3000)
    with log.open("r+b") as out:  # pages 10 to 20 of some 60
        out.seek(10 * 4096)
        out.write(os.urandom(10 * 4096))
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append, folder=tmp_path / "history", log=log, logging=logging)
    assert len(notes) == 1, notes
    if logging:
        assert notes[0].startswith(f"warning: the conversation log {log} is damaged (database disk image is malformed)")
        assert "moved to logs-damaged-" in notes[0] and not log.exists() and past.chains is not None
        assert len(list(tmp_path.glob("logs-damaged-*.db"))) == 1
    else:  # --no-log: nothing is written to the log, so it is left where it is
        assert "not used in this run" in notes[0] and log.exists()
        assert "the log is damaged: the next logged reply moves it aside" in notes[0], notes


@pytest.mark.parametrize("forget", ["delete", "empty"])
def test_a_log_deleted_or_emptied_is_forgotten_by_the_index(tmp_path, forget):
    """With logs.db deleted (or every message deleted from it) and no new message logged yet, the index kept
    drafting from conversations no longer in any log: forever with --no-log, and in the first reply of a run
    that logs. The index is derived from the log: a log with no message leaves it empty."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    tokenize = Tokenizer().tokenize
    assert lookup([open_history(tmp_path, notes).chains], tokenize("old pond"), 8).tokens
    if forget == "delete":
        (tmp_path / "logs.db").unlink()
    else:
        with connect(tmp_path / "logs.db") as conn, transaction(conn):
            conn.execute("DELETE FROM messages")
    past = open_history(tmp_path, notes)
    assert lookup([past.chains], tokenize("old pond"), 8).tokens == [] and notes == []
    log_messages(tmp_path / "logs.db", "write a limerick", "there once was a man from Peru")
    past.update()
    assert lookup([past.chains], tokenize("there once"), 8).tokens == tokenize(" was a m")


def test_a_log_behind_a_link_that_leads_nowhere_keeps_the_index(tmp_path):
    """A log on a disk not mounted is not a deleted one: the index keeps what it took from it."""
    notes: list[str] = []
    (tmp_path / "disk").mkdir()
    (tmp_path / "logs.db").symlink_to(tmp_path / "disk" / "logs.db")
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    (tmp_path / "disk").rename(tmp_path / "unmounted")
    tokenize = Tokenizer().tokenize
    assert lookup([open_history(tmp_path, notes).chains], tokenize("old pond"), 8).tokens == tokenize(", a frog")


@pytest.mark.parametrize("link", ["loop", "nowhere"])
def test_a_link_for_meta_is_rebuilt_as_a_file(tmp_path, link):
    """A symbolic link in place of meta.json (a loop, or one that leads nowhere) left the history unused in every
    run ("Too many levels of symbolic links", with no way out), or wrote the index's meta.json where the link
    led; a link is damage like a FIFO: replaced by a file, the index rebuilt from the log."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    meta = next((tmp_path / "history").glob("*/meta.json"))
    meta.unlink()
    meta.symlink_to(meta if link == "loop" else tmp_path / "elsewhere.json")
    again = open_history(tmp_path, notes)
    assert lookup([again.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    assert len(notes) == 1 and "rebuilt" in notes[0], notes
    assert meta.is_file() and not meta.is_symlink() and not (tmp_path / "elsewhere.json").exists()


@pytest.fixture
def unsearchable(monkeypatch, read_only):
    """unsearchable(folder): what mode 000 does to anyone but root: nothing in it can be looked at (os.stat
    raises PermissionError), nor written."""
    denied: list[str] = []
    real = os.stat

    def stat(path, *args, **kwargs):
        if any(str(path).startswith(f"{folder}{os.sep}") for folder in denied):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)

    def deny(folder) -> None:
        denied.append(str(folder))
        read_only(folder)

    return deny


def test_a_history_folder_that_cannot_be_searched_is_off_with_one_notice(private_log, unsearchable):
    """`chmod 000 <data dir>/history`: telling whether the index's folder exists raised PermissionError (Path.exists
    on Python 3.11), and `run` ended as an internal error before the reply, which was lost. The history is off for
    the run, with one notice; the reply is made."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    root = str(history_mod.root())
    unsearchable(root)
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append, logging=True)
    assert past.chains is None and len(notes) == 1 and "off in this run" in notes[0] and root in notes[0], notes


@pytest.mark.parametrize("logging", [False, True])
def test_a_data_folder_that_cannot_be_searched_is_no_internal_error(private_log, unsearchable, logging):
    """`chmod 000 <data dir>` and --no-log: asking whether logs.db is a file raised PermissionError (Path.is_file on
    Python 3.11), and `run` ended as an internal error before the reply."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    History.open(Tokenizer(), print)
    unsearchable(private_log)
    assert History.open(Tokenizer(), print, logging=logging).chains is None  # and no error


def test_the_hash_heads_are_read_not_mapped(tmp_path, monkeypatch):
    """The head file is mostly a hole (sparse: never written), and a lookup reads a bucket anywhere in it. On tmpfs
    a read through a mapping allocates a page for a hole, and on a full tmpfs that is SIGBUS: `run --mode suffix`
    died mid-reply (exit 135, the reply cut off). Only the written tokens and links are mapped; the heads are read."""
    mapped: list[str] = []
    real = np.memmap

    def memmap(path, *args, **kwargs):
        mapped.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(np, "memmap", memmap)
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past = open_history(tmp_path, notes)
    tokenize = Tokenizer().tokenize
    assert lookup([past.chains], tokenize("old pond"), 8).tokens == tokenize(", a frog")
    assert lookup([past.chains], tokenize("never seen before"), 8).tokens == []
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")
    past.update()
    assert lookup([past.chains], tokenize("old pond, "), 3).support[0] == 2
    assert mapped and not [path for path in mapped if path.endswith(".head")], mapped


def test_the_hash_heads_are_read_where_os_has_no_pread(tmp_path, monkeypatch):
    """os.pread is Unix's: on Windows every append and every lookup of the history raised AttributeError (the
    history 'not used in this run' in every run, `bench --history` an internal error)."""
    import os

    monkeypatch.delattr(os, "pread")
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past = open_history(tmp_path, notes)
    tokenize = Tokenizer().tokenize
    assert lookup([past.chains], tokenize("old pond"), 8).tokens == tokenize(", a frog")
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")
    past.update()
    assert lookup([past.chains], tokenize("old pond, "), 3).support[0] == 2
    assert not notes, notes


def test_a_directory_in_place_of_a_generation_file_is_rebuilt_and_drafted_from_in_that_run(tmp_path):
    """A directory in place of <generation>.tokens: the rebuild committed a new, empty generation, then failed
    to remove the directory ("Is a directory"), so that run said "not used in this run" and drafted from nothing;
    the old generation's files are leftovers, whose removal must not undo the rebuild."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    index = open_history(tmp_path, notes).index
    tokens = index.folder / f"{index.meta.generation}.tokens"
    tokens.unlink()
    tokens.mkdir()
    again = open_history(tmp_path, notes)
    assert len(notes) == 1 and "damaged" in notes[0] and "rebuilt" in notes[0], notes
    assert lookup([again.chains], Tokenizer().tokenize("old pond"), 8).tokens == Tokenizer().tokenize(", a frog")
    assert not tokens.exists()  # an empty directory in the index's own folder, with the index's own name


def test_a_rebuild_that_fails_leaves_no_files_behind(tmp_path):
    """A rebuild that could not commit (a directory in place of meta.json) left its new generation's three
    sparse files (96 MB apparent size) in the index's folder: one more set every run, until one succeeded."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    folder = open_history(tmp_path, notes).index.folder
    before = sorted(p.name for p in folder.iterdir())
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    for _ in range(3):
        assert open_history(tmp_path, notes).chains is None
    assert sorted(p.name for p in folder.iterdir()) == before, notes


def test_a_ctrl_c_just_after_a_rebuild_committed_keeps_its_files(tmp_path, monkeypatch):
    """A failed rebuild's files are removed (above); a Ctrl-C that landed after meta.json had been replaced removed
    the files of the generation it names, and the next run found the index damaged and built it again."""
    from specchat.historyindex import Meta

    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    index = open_history(tmp_path, notes).index
    real_write = Meta.write

    def committed_then_interrupted(self, path):
        real_write(self, path)
        raise KeyboardInterrupt

    monkeypatch.setattr(Meta, "write", committed_then_interrupted)
    old = index.meta.generation
    with pytest.raises(KeyboardInterrupt):
        index.create()
    monkeypatch.setattr(Meta, "write", real_write)
    generation = Meta.read(index.meta_path).generation
    assert {p.name for p in index.folder.iterdir() if p.name.startswith(generation)}, "the committed files went"
    assert not [p.name for p in index.folder.iterdir() if p.name.startswith(old)], "the old generation stayed"
    index.open()  # a committed index, whole: no IndexDamaged


@pytest.mark.parametrize("log", ["zero bytes", "no tables", "no messages table"])
def test_a_log_that_holds_no_messages_table_is_forgotten_as_a_deleted_one(tmp_path, log):
    """A 0-byte logs.db (truncated, or made by `touch`), or a database without the messages table, holds no
    message as a deleted log holds none, yet the index kept drafting from the conversations taken from the old
    log (its query failed on the missing table, which read as a locked log)."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    tokenize = Tokenizer().tokenize
    assert lookup([open_history(tmp_path, notes).chains], tokenize("old pond"), 8).tokens
    (tmp_path / "logs.db").unlink()
    (tmp_path / "logs.db").touch()
    if log != "zero bytes":
        with closing(sqlite3.connect(tmp_path / "logs.db")) as conn:
            conn.execute("PRAGMA user_version = 1" if log == "no tables" else "CREATE TABLE notes (text)")
            conn.commit()
    past = open_history(tmp_path, notes)
    assert past.chains is not None and lookup([past.chains], tokenize("old pond"), 8).tokens == [] and notes == []


@pytest.mark.parametrize("logging", [True, False])
def test_a_read_only_index_whose_log_was_deleted_is_not_drafted_from(private_log, read_only, logging):
    """A read-only history folder kept drafting from conversations whose log was deleted (it cannot be emptied),
    with no word of it, or only 'frozen': it is left out, with one notice that says why and how to forget them."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    folder = History.open(Tokenizer(), print).index.folder
    (private_log / "logs.db").unlink()
    read_only(history_mod.root())
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append, logging=logging)
    past.update()
    assert past.chains is None and len(notes) == 1, notes
    assert f"{folder} holds conversations the log no longer has" in notes[0] and "--no-history" in notes[0], notes
    # deleting a read-only folder fails as writing it does: the way out is to make it writable
    assert "make it writable (the next run makes it again from the log)" in notes[0] and "or delete" not in notes[0]


@pytest.mark.parametrize("denied", ["tokens", "head", "lock"])
def test_an_index_file_denied_is_one_notice_with_the_way_out(tmp_path, monkeypatch, denied):
    """An index file this user may not open (left by a run as another user, say with sudo) left the history
    unused in every run with "Permission denied" and no word of what to do; the notice says what to change or
    delete. (Raised by hand: the tests run as root, whom permissions do not stop.)"""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    index = open_history(tmp_path, notes).index
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")  # so that the lock is taken
    path = index.folder / (denied if denied == "lock" else f"{index.meta.generation}.{denied}")
    real_open, real_os_open = open, os.open

    def refuse(file):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr("builtins.open", lambda file, *a, **k: refuse(file) or real_open(file, *a, **k))
    monkeypatch.setattr(os, "open", lambda file, *a, **k: refuse(file) or real_os_open(file, *a, **k))
    assert open_history(tmp_path, notes).chains is None and len(notes) == 1, notes
    assert f"make {path} readable and writable by you" in notes[0] and "or delete it" in notes[0], notes
    # the lock holds nothing, so deleting it rebuilds nothing: the notice promised a rebuild for it too
    again = "it is made again" if denied == "lock" else "the history is rebuilt from the log"
    assert f"or delete it ({again})" in notes[0], notes


@pytest.mark.parametrize("frozen", [False, True])
def test_a_newer_specchats_index_is_kept_not_called_damaged(private_log, read_only, frozen):
    """An index a newer specchat made (meta version 2) was called damaged and rebuilt: a false notice, and the
    newer one's index replaced, by every run of an older specchat beside it. It is left as it is, not drafted
    from (its files may be laid out otherwise), with one notice saying so."""
    log_messages(private_log / "logs.db", "write a haiku", "old pond, a frog jumps in")
    folder = History.open(Tokenizer(), print).index.folder
    meta_path = folder / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "version": 2, "layout": "new"}))
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix in (".json", ".tokens")}
    if frozen:
        read_only(history_mod.root())
    notes: list[str] = []
    past = History.open(Tokenizer(), notes.append, logging=True)
    past.update()
    assert past.chains is None and len(notes) == 1, notes
    assert "a newer specchat (index version 2" in notes[0] and "damaged" not in notes[0], notes
    assert "upgrade specchat" in notes[0] and "--no-history" in notes[0], notes
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix in (".json", ".tokens")} == before


def test_a_leftover_wal_beside_the_log_is_named_with_the_way_out(tmp_path):
    """An emptied logs.db beside the old log's -wal: with --no-log the history's notice is the only word of it,
    and it said only that the -wal was left, not what to do with it (as the log's own warning does)."""
    from specchat.logfaults import LEFT_HINT

    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    (tmp_path / "logs.db-wal").write_bytes(b"the old log's latest messages" * 100)
    (tmp_path / "logs.db").write_bytes(b"")
    assert open_history(tmp_path, notes).chains is None
    assert len(notes) == 1 and f"holds its latest messages); {LEFT_HINT}; --no-history hides this" in notes[0], notes


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_for_the_log_is_not_waited_on(tmp_path):
    """A FIFO in place of logs.db hung `run --mode suffix` (and auto) before the reply: asking whether the log was
    emptied opened it with SQLite, which waits for a writer. It is not a log that was deleted: the index is kept
    (the run's log writer says what is wrong with the file)."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    open_history(tmp_path, notes)
    (tmp_path / "logs.db").unlink()
    os.mkfifo(tmp_path / "logs.db")
    opened = []
    reader = threading.Thread(target=lambda: opened.append(open_history(tmp_path, notes)), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # a hang fails the test, not the suite: a writer that goes at once ends the wait
        os.close(os.open(tmp_path / "logs.db", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the history waited on a FIFO in place of the log")
    tokenize = Tokenizer().tokenize
    assert lookup([opened[0].chains], tokenize("old pond"), 8).tokens == tokenize(", a frog") and notes == []


@pytest.mark.parametrize("link", ["nowhere", "to a file"])
def test_a_link_for_the_lock_is_named_with_the_way_out(tmp_path, link):
    """A symbolic link in place of the index's lock file (restored from a backup, say): the lock refuses to follow
    it, and the history was unused in every run with a bare "Too many levels of symbolic links"."""
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    lock = open_history(tmp_path, notes).index.folder / "lock"
    lock.unlink()
    (tmp_path / "elsewhere").touch()
    lock.symlink_to(tmp_path / ("nowhere" if link == "nowhere" else "elsewhere"))
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")  # so that the lock is taken
    assert open_history(tmp_path, notes).chains is None and len(notes) == 1, notes
    assert f"remove {lock} (a link where the index keeps a file; it is made again)" in notes[0], notes
    assert "--no-history" in notes[0], notes
    lock.unlink()
    notes.clear()
    assert open_history(tmp_path, notes).chains is not None and notes == []


def test_a_newer_index_committed_while_waiting_for_the_lock_is_one_notice(tmp_path, monkeypatch):
    """An older specchat waiting for the lock while a newer one committed its index (meta version 2) read it on the
    way out of the wait: NewerIndex escaped update(), which never raises, and `run` showed a traceback."""
    from filelock import Timeout

    from specchat.historyindex import HistoryIndex, NewerIndex

    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past = open_history(tmp_path, notes)
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")

    def newer_committed(self):
        raise NewerIndex("made by a newer specchat (index version 2; this one reads 1)")

    monkeypatch.setattr(History, "_update", lambda self: (_ for _ in ()).throw(Timeout(str(tmp_path / "lock"))))
    monkeypatch.setattr(HistoryIndex, "refresh", newer_committed)
    past.update()
    assert past.chains is None and len(notes) == 1, notes
    assert "a newer specchat (index version 2" in notes[0] and "upgrade specchat" in notes[0], notes


def test_a_first_index_of_a_long_log_is_said_once(tmp_path, monkeypatch):
    """Indexing 8M characters of a heavy user's log took ~5 s of a run with no word on screen."""
    monkeypatch.setattr(history_mod, "NOTICE_CHARS", 40)
    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku about a frog", "old pond, a frog jumps in: the sound of water")
    past = open_history(tmp_path, notes)
    assert [note.split(" characters")[0] for note in notes] == ["history: indexing 71"]
    log_messages(tmp_path / "logs.db", "again", "short")
    past.update()
    assert len(notes) == 1


def test_a_full_disk_is_one_notice_that_says_so(tmp_path, monkeypatch):
    """A full disk left the history unused with "[Errno 28] No space left on device" and no way out, where the
    reply's own warning says the disk is full and what to do; the committed index is left as it was."""
    import errno

    from specchat import historyindex

    notes: list[str] = []
    log_messages(tmp_path / "logs.db", "write a haiku", "old pond, a frog jumps in")
    past = open_history(tmp_path, notes)
    meta = next((tmp_path / "history").glob("*/meta.json"))
    committed = meta.read_text()

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(historyindex, "_put", full)
    log_messages(tmp_path / "logs.db", "again", "old pond, the water's sound")
    past.update()
    assert len(notes) == 1 and "No space left on device" in notes[0] and "[Errno" not in notes[0], notes
    assert f"the disk that holds {past.index.folder} is full: free some space" in notes[0], notes
    assert meta.read_text() == committed
